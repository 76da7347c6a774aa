import { isAwsError } from '../base/errors.js';

/**
 * Runs one conditional write. `false` when its condition failed: for the callers (claims, leases,
 * re-plans, releases) that is the expected outcome of a lost race, so an answer, never an error.
 * Every other error is thrown.
 */
export async function writeIfCondition(send: () => Promise<unknown>): Promise<boolean> {
  try {
    await send();
    return true;
  } catch (error) {
    if (isAwsError(error, 'ConditionalCheckFailedException')) return false;
    throw error;
  }
}
