import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { localAwsClients } from '../../local/cloud/aws-clients.js';
import type { CloudEndpoints } from '../../local/cloud/cloud.js';
import {
  createPrefixStore,
  type PrefixStore,
  type PrefixStoreOptions,
} from '../../shared/repositories/prefix/store.js';
import type { CutRow, PrefixPointer, SaveAck } from '../../shared/repositories/prefix/types.js';

/**
 * Shared by the prefix store's cloud suites: a DynamoDB client that records every command and lets a
 * test inject what AWS does and DynamoDB Local does not (slow calls, unprocessed items, errors), and
 * the rows and request shapes the tests build and inspect.
 */

/** Retries in milliseconds, so injected failures do not slow the suites down. */
export const FAST_BACKOFF = { baseMs: 2, capMs: 20, maxRetries: 6 };

export type Json = Record<string, unknown>;
export type Next = (input?: Json) => Promise<{ output: Json }>;
export type Hook = (command: string, input: Json, next: Next) => Promise<{ output: Json }>;

export interface Call {
  readonly command: string;
  readonly input: Json;
  readonly at: number;
}

/** A fresh client (so middleware never leaks between tests) that records every command. */
export function instrumentedClient(
  endpoints: CloudEndpoints,
  hook?: Hook,
): { dynamo: DynamoDBClient; calls: Call[] } {
  const { dynamo } = localAwsClients(endpoints);
  const calls: Call[] = [];
  dynamo.middlewareStack.add(
    (next, context) => async (args) => {
      const command = String(context.commandName).replace(/Command$/, '');
      const input = args.input as Json;
      calls.push({ command, input, at: Date.now() });
      const proceed: Next = async (changed) =>
        (await next(changed === undefined ? args : { ...args, input: changed })) as unknown as {
          output: Json;
        };
      const result = hook === undefined ? await proceed() : await hook(command, input, proceed);
      return result as unknown as Awaited<ReturnType<typeof next>>;
    },
    { step: 'initialize', name: 'prefixTestFaults', priority: 'high' },
  );
  return { dynamo, calls };
}

/**
 * A prefix store on `tableName` over a fresh recording client (see `instrumentedClient`), with the
 * suites' limits and fast backoff unless `options` says otherwise.
 */
export function instrumentedStore(
  endpoints: CloudEndpoints,
  tableName: string,
  options: Partial<PrefixStoreOptions> & { hook?: Hook } = {},
): { store: PrefixStore; calls: Call[]; dynamo: DynamoDBClient } {
  const { hook, ...rest } = options;
  const { dynamo, calls } = instrumentedClient(endpoints, hook);
  const store = createPrefixStore({
    client: dynamo,
    tableName,
    limits: { maxRows: 256, maxTokens: 4_194_304 },
    backoff: FAST_BACKOFF,
    ...rest,
  });
  return { store, calls, dynamo };
}

let uniqueCounter = 0;
export function unique(label: string): string {
  uniqueCounter += 1;
  return `${label}-${Date.now().toString(36)}-${uniqueCounter}`;
}

/** A row of `count` pseudo-random token ids (seeded by the call id) below a BPE-sized vocabulary. */
export function row(callId: string, count: number, extra: Partial<CutRow> = {}): CutRow {
  let seed = [...callId].reduce((sum, ch) => sum * 31 + ch.charCodeAt(0), 7) >>> 0;
  const tokens = Array.from({ length: count }, () => {
    seed = (seed * 1_103_515_245 + 12_345) >>> 0;
    return seed % 150_000;
  });
  return {
    callId,
    contentId: 'c-ckpt',
    weightVersion: 2,
    tokens,
    logprobs: tokens.map((t) => -t / 3000),
    ...extra,
  };
}

export function saved(ack: SaveAck): PrefixPointer {
  if (ack.status !== 'saved') throw new Error(`expected saved, got ${ack.reason}: ${ack.message}`);
  return ack.pointer;
}

/** The keys a BatchWriteItem (puts or deletes) or BatchGetItem call names. */
export function keysIn(call: Pick<Call, 'input'>, tableName: string): string[] {
  const requestItems = (call.input.RequestItems ?? {}) as Record<string, unknown>;
  const entries = requestItems[tableName];
  if (Array.isArray(entries)) {
    return entries.map((entry: Json) => {
      const put = entry.PutRequest as { Item: Json } | undefined;
      const del = entry.DeleteRequest as { Key: Json } | undefined;
      return String((put?.Item ?? del?.Key)?.pk);
    });
  }
  return ((entries as { Keys?: Json[] } | undefined)?.Keys ?? []).map((key) => String(key.pk));
}

export function isPutBatch(call: Pick<Call, 'command' | 'input'>, tableName: string): boolean {
  return (
    call.command === 'BatchWriteItem' &&
    ((call.input.RequestItems as Record<string, Json[]>)[tableName]?.[0]?.PutRequest ?? undefined) !==
      undefined
  );
}
