import { ValidationError } from '../errors.js';

/** The one error shape of the wire codec: `<field>: <problem>`, the field also in `context`. */
export function invalid(
  field: string,
  problem: string,
  status: 400 | 413 | 422 = 400,
  cause?: unknown,
): ValidationError {
  return new ValidationError(`${field}: ${problem}`, { status, context: { field }, cause });
}
