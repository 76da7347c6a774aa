import type { HandlerExecutionContext } from '@smithy/types';
import {
  type InitializeArgs,
  type InitializeNext,
  type InitializeOutput,
  initializeStackOf,
} from '../../../local/cloud/client-middleware.js';
import type { AwsClients } from '../../../shared/aws/clients.js';
import { hashString, seedWords, uniformAt } from '../../../shared/backend/reference/prng.js';
import {
  type Service,
  serverError,
  throttleError,
  timeoutError,
  transactionConflictError,
} from './errors.js';
import {
  DEFAULT_STALE_INDEX,
  type QueryInput,
  type QueryPage,
  StaleIndex,
  type StaleIndexOptions,
} from './stale-index.js';

/**
 * Fault injection for tests: SDK middleware on the DynamoDB, S3 and SQS clients that, by seeded
 * probability, makes a call fail or answer as AWS sometimes does and the local cloud never does.
 *
 * - `throttle`            before executing: ProvisionedThroughputExceeded / SlowDown 503 / RequestThrottled
 * - `serverError`         before executing: a 5xx (InternalServerError / InternalError / InternalFailure)
 * - `transactionConflict` TransactWriteItems only, before executing: TransactionCanceledException with
 *                         one TransactionConflict reason
 * - `unprocessed`         BatchWriteItem / BatchGetItem: a random part of the request is not executed and
 *                         comes back in UnprocessedItems / UnprocessedKeys (at least one item is executed)
 * - `timeoutAfterWrite`   write operations: executed, then a TimeoutError (the write landed; E5)
 * - `latency`             a seeded delay before executing
 * - `lateRow`, `lingeringRow`  Query on the `live` index: rows appearing late, terminal rows lingering
 *                         (see `stale-index.ts`); the rate is per row
 *
 * Everything is off unless a rate is set. The middleware runs outside the SDK's retries (initialize
 * step), so every injected fault reaches the caller as if the SDK's own retries were exhausted.
 * Decisions are counter-based: the n-th call of an operation draws the same numbers for the same
 * seed whatever else runs concurrently, so a run is reproducible from its seed and call order.
 */

export const FAULT_KINDS = [
  'throttle',
  'serverError',
  'transactionConflict',
  'unprocessed',
  'timeoutAfterWrite',
  'latency',
  'lateRow',
  'lingeringRow',
] as const;

export type FaultKind = (typeof FAULT_KINDS)[number];

/** Probability per call (per row for `lateRow` and `lingeringRow`), in [0, 1]. */
export type FaultRates = Partial<Record<FaultKind, number>>;

export interface FaultPlan {
  readonly seed: number;
  /** Rates for every operation the kind applies to. */
  readonly rates?: FaultRates;
  /** Rates per operation (`PutItem`, `TransactWriteItems`, `PutObject`, `SendMessage`, ...); they win. */
  readonly operations?: Readonly<Record<string, FaultRates>>;
  /** Range of an injected delay (default 5-50 ms). */
  readonly latencyMs?: { readonly min: number; readonly max: number };
  readonly staleIndex?: Partial<StaleIndexOptions>;
  /** How a delay is waited for (tests may record it instead). */
  readonly sleep?: (ms: number) => Promise<void>;
}

/** Operations that change something: a timeout after them leaves the caller unsure whether it landed. */
export const WRITE_OPERATIONS: ReadonlySet<string> = new Set([
  'PutItem',
  'UpdateItem',
  'DeleteItem',
  'BatchWriteItem',
  'TransactWriteItems',
  'PutObject',
  'CopyObject',
  'DeleteObject',
  'DeleteObjects',
  'CompleteMultipartUpload',
  'SendMessage',
  'SendMessageBatch',
  'DeleteMessage',
  'DeleteMessageBatch',
  'ChangeMessageVisibility',
  'ChangeMessageVisibilityBatch',
]);

const SERVICES: Readonly<Record<string, Service>> = {
  DynamoDBClient: 'dynamodb',
  S3Client: 's3',
  SQSClient: 'sqs',
};

type Json = Record<string, unknown>;
type Handler = InitializeNext;
type Args = InitializeArgs;
type Output = InitializeOutput;

export type FaultTarget = AwsClients | { readonly middlewareStack: unknown };

let injectors = 0;

export class FaultInjector {
  /** Faults injected so far, by kind (rows for the index kinds). */
  readonly counts: Record<FaultKind, number> = Object.fromEntries(
    FAULT_KINDS.map((kind) => [kind, 0]),
  ) as Record<FaultKind, number>;
  /** Faults injected per operation and kind. */
  readonly byOperation: Record<string, Partial<Record<FaultKind, number>>> = {};
  /** Calls seen per operation (faulted or not). */
  readonly calls: Record<string, number> = {};

  private enabled = true;
  private readonly rates: FaultRates;
  private readonly perOperation: Record<string, FaultRates>;
  private readonly seedWords: [number, number];
  private readonly staleIndex: StaleIndex;
  private readonly name = `faultInjection${++injectors}`;

  constructor(private readonly plan: FaultPlan) {
    this.rates = { ...plan.rates };
    this.perOperation = Object.fromEntries(
      Object.entries(plan.operations ?? {}).map(([operation, rates]) => [operation, { ...rates }]),
    );
    for (const rates of [this.rates, ...Object.values(this.perOperation)]) {
      for (const [kind, rate] of Object.entries(rates)) checkRate(kind, rate);
    }
    this.seedWords = seedWords(plan.seed);
    this.staleIndex = new StaleIndex({ ...DEFAULT_STALE_INDEX, ...plan.staleIndex });
  }

  /** Adds the middleware to each client (the document client shares the DynamoDB client's stack). */
  attach(...targets: readonly FaultTarget[]): () => void {
    const stacks = targets.flatMap((target) =>
      'dynamo' in target ? [target.dynamo, target.s3, target.sqs] : [target],
    );
    for (const client of stacks) {
      initializeStackOf(client).add((next, context) => this.middleware(next, context), {
        step: 'initialize',
        priority: 'high',
        name: this.name,
        override: true,
      });
    }
    return () => {
      for (const client of stacks) initializeStackOf(client).remove(this.name);
    };
  }

  /** Sets a kind's rate for every operation, or for one operation only. */
  set(kind: FaultKind, rate: number, operation?: string): this {
    checkRate(kind, rate);
    if (operation === undefined) this.rates[kind] = rate;
    else this.perOperation[operation] = { ...this.perOperation[operation], [kind]: rate };
    return this;
  }

  /** Stops injecting anything (counts are kept), e.g. before a run's final checks. */
  off(): this {
    this.enabled = false;
    return this;
  }

  on(): this {
    this.enabled = true;
    return this;
  }

  /** Total faults injected. */
  get total(): number {
    return FAULT_KINDS.reduce((sum, kind) => sum + this.counts[kind], 0);
  }

  rate(kind: FaultKind, operation: string): number {
    if (!this.enabled) return 0;
    return this.perOperation[operation]?.[kind] ?? this.rates[kind] ?? 0;
  }

  private draw(operation: string, kind: FaultKind, call: number, extra = 0): number {
    return uniformAt(
      this.seedWords[0],
      this.seedWords[1],
      hashString(operation),
      FAULT_KINDS.indexOf(kind),
      call,
      extra,
    );
  }

  private fires(operation: string, kind: FaultKind, call: number, extra = 0): boolean {
    const rate = this.rate(kind, operation);
    return rate > 0 && this.draw(operation, kind, call, extra) < rate;
  }

  private count(operation: string, kind: FaultKind, by = 1): void {
    if (by === 0) return;
    this.counts[kind] += by;
    const counts = this.byOperation[operation] ?? {};
    counts[kind] = (counts[kind] ?? 0) + by;
    this.byOperation[operation] = counts;
  }

  private middleware(next: Handler, context: HandlerExecutionContext): Handler {
    return async (args: Args): Promise<Output> => {
      const service = SERVICES[context.clientName ?? ''];
      const operation = context.commandName?.replace(/Command$/, '');
      if (service === undefined || operation === undefined || !this.enabled) return next(args);
      const call = this.calls[operation] ?? 0;
      this.calls[operation] = call + 1;
      const input = args.input as Json;

      if (this.fires(operation, 'latency', call)) {
        this.count(operation, 'latency');
        const { min, max } = this.plan.latencyMs ?? { min: 5, max: 50 };
        const delay = min + (max - min) * this.draw(operation, 'latency', call, 1);
        await (this.plan.sleep ?? defaultSleep)(delay);
      }
      if (this.fires(operation, 'throttle', call)) {
        this.count(operation, 'throttle');
        throw throttleError(service, operation);
      }
      if (this.fires(operation, 'serverError', call)) {
        this.count(operation, 'serverError');
        throw serverError(service, operation);
      }
      if (operation === 'TransactWriteItems' && this.fires(operation, 'transactionConflict', call)) {
        const items = Array.isArray(input.TransactItems) ? input.TransactItems.length : 1;
        const conflicting = Math.floor(this.draw(operation, 'transactionConflict', call, 1) * items);
        this.count(operation, 'transactionConflict');
        throw transactionConflictError(items, conflicting);
      }

      let held: Json | undefined;
      let run = args;
      if (
        (operation === 'BatchWriteItem' || operation === 'BatchGetItem') &&
        this.fires(operation, 'unprocessed', call)
      ) {
        const split = splitBatch(operation, input, (extra) =>
          this.draw(operation, 'unprocessed', call, extra),
        );
        if (split !== undefined) {
          this.count(operation, 'unprocessed');
          held = split.held;
          run = { ...args, input: split.executed };
        }
      }

      const result = await next(run);

      if (WRITE_OPERATIONS.has(operation) && this.fires(operation, 'timeoutAfterWrite', call)) {
        this.count(operation, 'timeoutAfterWrite');
        discardBody(result.output);
        throw timeoutError(operation);
      }
      if (held !== undefined) {
        const field = operation === 'BatchWriteItem' ? 'UnprocessedItems' : 'UnprocessedKeys';
        const output = result.output as Json;
        return {
          ...result,
          output: { ...output, [field]: mergeUnprocessed(output[field], held, operation) },
        };
      }
      if (operation === 'Query' && this.staleIndex.applies(input as QueryInput)) {
        const draw = (kind: 'lateRow' | 'lingeringRow', row: string) =>
          this.fires(operation, kind, call, hashString(row));
        const stale = this.staleIndex.rewrite(input as QueryInput, result.output as QueryPage, draw);
        this.count(operation, 'lateRow', stale.late);
        this.count(operation, 'lingeringRow', stale.lingering);
        return { ...result, output: { ...result.output, ...stale.page } };
      }
      return result;
    };
  }
}

export function createFaultInjector(plan: FaultPlan): FaultInjector {
  return new FaultInjector(plan);
}

function checkRate(kind: string, rate: unknown): void {
  if (!(FAULT_KINDS as readonly string[]).includes(kind)) throw new Error(`unknown fault kind ${kind}`);
  if (typeof rate !== 'number' || !(rate >= 0 && rate <= 1)) {
    throw new Error(`the rate of ${kind} must be within [0, 1], got ${String(rate)}`);
  }
}

function defaultSleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

interface BatchEntry {
  readonly table: string;
  readonly entry: unknown;
}

/**
 * Moves between 1 and n-1 of a batch's n requests (chosen by `draw`) out of the call, as DynamoDB
 * does under load; undefined for a batch of one, which DynamoDB either runs or throttles whole.
 */
function splitBatch(
  operation: 'BatchWriteItem' | 'BatchGetItem',
  input: Json,
  draw: (extra: number) => number,
): { executed: Json; held: Json } | undefined {
  const requestItems = (input.RequestItems ?? {}) as Record<string, unknown>;
  const entries: BatchEntry[] = Object.entries(requestItems).flatMap(([table, requests]) => {
    const list =
      operation === 'BatchWriteItem' ? (requests as unknown[]) : (requests as { Keys: unknown[] }).Keys;
    return list.map((entry) => ({ table, entry }));
  });
  if (entries.length < 2) return undefined;
  // A seeded Fisher-Yates shuffle; the first `moved` entries are held back.
  const order = entries.map((_, index) => index);
  for (let index = order.length - 1; index > 0; index--) {
    const other = Math.floor(draw(index + 2) * (index + 1));
    [order[index], order[other]] = [order[other]!, order[index]!];
  }
  const moved = 1 + Math.floor(draw(1) * (entries.length - 1));
  const heldIndexes = new Set(order.slice(0, moved));
  /** The entries that are held back (`held`) or executed (`!held`), grouped by table again. */
  const group = (held: boolean): Json => {
    const grouped: Record<string, unknown[]> = {};
    entries.forEach(({ table, entry }, index) => {
      if (heldIndexes.has(index) !== held) return;
      const list = grouped[table] ?? [];
      list.push(entry);
      grouped[table] = list;
    });
    if (operation === 'BatchWriteItem') return grouped;
    return Object.fromEntries(
      Object.entries(grouped).map(([table, keys]) => [
        table,
        { ...(requestItems[table] as Json), Keys: keys },
      ]),
    );
  };
  return { executed: { ...input, RequestItems: group(false) }, held: group(true) };
}

function mergeUnprocessed(existing: unknown, held: Json, operation: string): Json {
  const merged: Json = { ...((existing ?? {}) as Json) };
  for (const [table, part] of Object.entries(held)) {
    const before = merged[table];
    if (before === undefined) merged[table] = part;
    else if (operation === 'BatchWriteItem')
      merged[table] = [...(before as unknown[]), ...(part as unknown[])];
    else {
      const keys = [...(before as { Keys: unknown[] }).Keys, ...(part as { Keys: unknown[] }).Keys];
      merged[table] = { ...(before as Json), Keys: keys };
    }
  }
  return merged;
}

/** A streamed body nobody will read must be released, or its socket stays open. */
function discardBody(output: unknown): void {
  const body = (output as { Body?: { destroy?: () => void } } | undefined)?.Body;
  body?.destroy?.();
}
