/**
 * One error hierarchy for the whole project. Every error has a stable `name`, an optional `cause`,
 * and context fields; the API edge maps them to HTTP answers, the worker to step failures.
 */

export interface ErrorContext {
  readonly [key: string]: string | number | boolean | undefined;
}

export abstract class TinkerError extends Error {
  /** HTTP status the API edge answers with. */
  abstract readonly status: number;
  /** Category reported to Tinker clients for failed futures. */
  readonly category: 'user' | 'server' = 'server';
  readonly context: ErrorContext;

  constructor(message: string, options: { cause?: unknown; context?: ErrorContext } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.context = options.context ?? {};
  }
}

/** A required setting is missing or malformed. Thrown at start-up, naming the variable. */
export class ConfigError extends TinkerError {
  readonly status = 500;
}

/** The request is malformed or violates a limit; nothing was stored. */
export class ValidationError extends TinkerError {
  readonly status: number;
  override readonly category = 'user' as const;
  constructor(
    message: string,
    options: { cause?: unknown; context?: ErrorContext; status?: 400 | 413 | 415 | 422 } = {},
  ) {
    super(message, options);
    this.status = options.status ?? 400;
  }
}

/** A `ValidationError` about one field: the message reads `<field>: <problem>`, the field in `context`. */
export function invalidField(
  field: string,
  problem: string,
  status: 400 | 413 | 415 | 422 = 400,
  cause?: unknown,
): ValidationError {
  return new ValidationError(`${field}: ${problem}`, { status, context: { field }, cause });
}

export class AuthError extends TinkerError {
  readonly status = 401;
  override readonly category = 'user' as const;
}

/** Unknown id, or an id that belongs to another tenant (never distinguishable from outside). */
export class NotFoundError extends TinkerError {
  readonly status = 404;
  override readonly category = 'user' as const;
}

/** The thing named has ended for good (a finished session): answered 410, which stops the SDK's heartbeat. */
export class GoneError extends TinkerError {
  readonly status = 410;
  override readonly category = 'user' as const;
}

/** The same idempotency key was used with a different payload, or a seq_id went backwards (R7). */
export class IdempotencyConflictError extends TinkerError {
  readonly status = 400;
  override readonly category = 'user' as const;
}

/** Something the client may retry later (for example a checkpoint that is not saved yet). */
export class RetryLaterError extends TinkerError {
  readonly status = 408;
}

/**
 * A per-tenant (or the operators') quota is used up for now (docs/configuration.md#over-a-quota): answered 429 with
 * Retry-After, which the Tinker SDK honours and otherwise backs off on. Nothing was stored.
 */
export class QuotaExceededError extends TinkerError {
  readonly status = 429;
  override readonly category = 'user' as const;
  /** How long until the quota has room again (at least 1 ms). */
  readonly retryAfterMs: number;
  constructor(message: string, retryAfterMs: number, options: { context?: ErrorContext } = {}) {
    super(message, options);
    this.retryAfterMs = Math.max(1, Math.ceil(retryAfterMs));
  }
}

/** A bad input found while executing a step: fails that step only (E6). */
export class StepUserError extends TinkerError {
  readonly status = 400;
  override readonly category = 'user' as const;
}

/** Infrastructure failed; the work is retried or re-planned, never reported as the user's fault. */
export class InfrastructureError extends TinkerError {
  readonly status = 503;
}

/** A conditional write lost a race (claim, commit, lease renewal). Expected under overlap. */
export class ConditionLostError extends TinkerError {
  readonly status = 409;
}

/** Matches an AWS SDK error by its `name`, the stable way to recognise SDK exceptions. */
export function isAwsError(error: unknown, ...names: string[]): error is Error {
  return error instanceof Error && names.includes(error.name);
}
