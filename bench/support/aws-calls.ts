import type { HandlerExecutionContext } from '@smithy/types';
import { type InitializeNext, initializeStackOf } from '../../local/cloud/client-middleware.js';
import { currentFunctionScope } from '../../local/runtime/grant-enforcement.js';
import type { SdkClient } from '../../local/runtime/lambda-runtime.js';
import { FUNCTION_IDS, type FunctionId } from '../../shared/base/topology.js';

/**
 * AWS calls the local stack makes, counted by a middleware on every SDK client the runtime shows
 * (`onSdkClient`): by service, and by who made them, a function (the scope its invocation runs in,
 * local/runtime/grant-enforcement.ts) or the runtime's own triggers (stream reads, queue receives and
 * deletes). Retries inside the SDK are one call: this counts what the code asks for.
 */

export const SERVICES = {
  DynamoDBClient: 'dynamodb',
  DynamoDBStreamsClient: 'dynamodb_streams',
  S3Client: 's3',
  SQSClient: 'sqs',
} as const;
export type Service = (typeof SERVICES)[keyof typeof SERVICES];
export type Caller = FunctionId | 'triggers' | 'other';
export const CALLERS: readonly Caller[] = [...FUNCTION_IDS, 'triggers', 'other'];

export interface CallCount {
  readonly service: Service | 'unknown';
  readonly caller: Caller;
  readonly operation: string;
  readonly calls: number;
}

export class AwsCallCounter {
  readonly #counts = new Map<string, CallCount>();

  /** For `startLocalRuntime({ onSdkClient })`. */
  readonly install = (client: SdkClient, user: 'handlers' | 'triggers'): void => {
    const middleware =
      (next: InitializeNext, context: HandlerExecutionContext): InitializeNext =>
      (args) => {
        const caller: Caller =
          user === 'triggers' ? 'triggers' : (currentFunctionScope()?.functionId ?? 'other');
        const service = SERVICES[context.clientName as keyof typeof SERVICES] ?? 'unknown';
        this.#add(service, caller, context.commandName?.replace(/Command$/, '') ?? '?');
        return next(args);
      };
    initializeStackOf(client).add(middleware, {
      step: 'initialize',
      priority: 'high',
      name: 'benchAwsCallCounter',
      override: true,
    });
  };

  #add(service: CallCount['service'], caller: Caller, operation: string): void {
    const key = `${service} ${caller} ${operation}`;
    const count = this.#counts.get(key);
    this.#counts.set(key, { service, caller, operation, calls: (count?.calls ?? 0) + 1 });
  }

  /** Every count so far; two snapshots' difference is what happened between them. */
  snapshot(): readonly CallCount[] {
    return [...this.#counts.values()];
  }
}

/** The calls made between two snapshots, per (service, caller, operation), most first. */
export function callsBetween(before: readonly CallCount[], after: readonly CallCount[]): CallCount[] {
  const earlier = new Map(
    before.map((count) => [`${count.service} ${count.caller} ${count.operation}`, count]),
  );
  return after
    .map((count) => ({
      ...count,
      calls: count.calls - (earlier.get(`${count.service} ${count.caller} ${count.operation}`)?.calls ?? 0),
    }))
    .filter((count) => count.calls > 0)
    .sort((a, b) => b.calls - a.calls);
}

/** Calls per request by service and by caller (`calls_per_request_<service|caller>`), and in all. */
export function callsPerRequest(calls: readonly CallCount[], requests: number): Record<string, number> {
  const per = (n: number) => Math.round((n / Math.max(requests, 1)) * 1000) / 1000;
  const sum = (match: (count: CallCount) => boolean) =>
    calls.filter(match).reduce((total, count) => total + count.calls, 0);
  const counts: Record<string, number> = { calls_per_request: per(sum(() => true)) };
  for (const service of Object.values(SERVICES)) {
    counts[`calls_per_request_${service}`] = per(sum((count) => count.service === service));
  }
  for (const caller of CALLERS) {
    counts[`calls_per_request_${caller}`] = per(sum((count) => count.caller === caller));
  }
  return counts;
}
