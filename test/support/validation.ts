import { expect } from 'vitest';
import { ValidationError } from '../../shared/base/errors.js';

/** The ValidationError `run` throws; fails the test when it throws anything else or nothing. */
export function validationErrorOf(run: () => unknown): ValidationError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(ValidationError);
    return error as ValidationError;
  }
  throw new Error('expected a ValidationError');
}
