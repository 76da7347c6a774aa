import { type DynamoDBDocumentClient, GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { Limiter } from '../../shared/aws/limiter.js';
import { encodeCutRow } from '../../shared/repositories/prefix/codec/cut-row.js';
import { decodeRowItem } from '../../shared/repositories/prefix/codec/row-item.js';
import { segmentRowKeys } from '../../shared/repositories/prefix/pointer.js';
import { parseRowItem, type RowItemRecord } from '../../shared/repositories/prefix/records.js';
import type { CutRow, PrefixPointer } from '../../shared/repositories/prefix/types.js';

/**
 * The baselines the prefix store is measured against: every call saved and restored on its own, one
 * PutItem per stored item and one strongly consistent GetItem per item. They store the same bytes
 * as the store (same row encoding, same chunking, same record shape), so a comparison measures
 * batching and nothing else. `concurrency` 1 is the sequential baseline.
 */

export interface BaselineTable {
  readonly doc: DynamoDBDocumentClient;
  readonly tableName: string;
}

/** Saves each call with its own PutItem(s); returns the number of items written. */
export async function putPerCall(
  table: BaselineTable,
  rows: readonly CutRow[],
  attempt: string,
  concurrency: number,
  ttl: number,
): Promise<number> {
  const limiter = new Limiter(concurrency);
  const written = await Promise.all(
    rows.map((row) =>
      limiter.run(async () => {
        const encoded = encodeCutRow(row, attempt);
        for (const item of encoded.items) {
          const record: RowItemRecord = {
            pk: item.key,
            kind: 'row',
            group: 'per-call',
            ttl,
            data: item.bytes,
          };
          await table.doc.send(new PutCommand({ TableName: table.tableName, Item: { ...record } }));
        }
        return encoded.items.length;
      }),
    ),
  );
  return written.reduce((sum, count) => sum + count, 0);
}

export interface RestoredCall {
  readonly callId: string;
  readonly tokens: Uint32Array;
  readonly logprobs: Float32Array;
}

/** Restores each call's rows with its own GetItem(s) (ConsistentRead), decoding and checking each. */
export function getPerCall(
  table: BaselineTable,
  pointers: readonly PrefixPointer[],
  concurrency: number,
): Promise<RestoredCall[]> {
  const limiter = new Limiter(concurrency);
  return Promise.all(
    pointers.map((pointer) =>
      limiter.run(async () => {
        const tokens = new Uint32Array(pointer.length);
        const logprobs = new Float32Array(pointer.length);
        let at = 0;
        for (const segment of pointer.segments) {
          for (const key of segmentRowKeys(pointer.callId, segment)) {
            const { Item } = await table.doc.send(
              new GetCommand({ TableName: table.tableName, Key: { pk: key }, ConsistentRead: true }),
            );
            const row = parseRowItem(Item);
            if (row === undefined) throw new Error(`baseline restore: row ${key} is missing or malformed`);
            // decodeRowItem checks the item's own sha256.
            const item = decodeRowItem(row.data);
            tokens.set(item.tokens, at);
            logprobs.set(item.logprobs, at);
            at += item.tokens.length;
          }
        }
        if (at !== pointer.length) throw new Error(`baseline restore: ${pointer.callId} has ${at} tokens`);
        return { callId: pointer.callId, tokens, logprobs };
      }),
    ),
  );
}
