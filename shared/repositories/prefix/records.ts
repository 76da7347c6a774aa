import { z } from 'zod';

/**
 * Items of the `prefixes` table: row items (one chunk of one call's cut) and one record per group
 * that says whether the group committed, and exactly what it vouches for (P2, P4a).
 */

export interface RowItemRecord {
  readonly pk: string;
  readonly kind: 'row';
  /** The group it was written in (for operators and the sweeper; readers trust the commit record). */
  readonly group: string;
  /** Epoch seconds; DynamoDB deletes lazily, so readers check it themselves. */
  readonly ttl: number;
  readonly data: Uint8Array;
}

export interface CommittedRow {
  readonly key: string;
  readonly digest: string;
  readonly tokens: number;
}

/** What a commit record says about one call's cut. */
export interface CommittedCall {
  readonly call: string;
  readonly cut: number;
  readonly content: string;
  readonly weight_version: number;
  readonly prev_length: number;
  readonly length: number;
  readonly prev_chain: string;
  readonly chain: string;
  readonly rows: readonly CommittedRow[];
}

export interface CommitRecord {
  readonly pk: string;
  readonly kind: 'group';
  readonly status: 'committed';
  /** Unique per `saveCut` invocation: tells my commit from anyone else's when read back. */
  readonly writer: string;
  readonly attempt: string;
  readonly ttl: number;
  readonly at: number;
  readonly calls: readonly CommittedCall[];
}

export interface AbortRecord {
  readonly pk: string;
  readonly kind: 'group';
  readonly status: 'aborted';
  readonly writer: string;
  readonly attempt: string;
  readonly ttl: number;
  readonly at: number;
}

export type GroupRecord = CommitRecord | AbortRecord;

const committedRow = z.object({
  key: z.string(),
  digest: z.string(),
  tokens: z.number().int().nonnegative(),
});

const committedCall = z.object({
  call: z.string(),
  cut: z.number().int().nonnegative(),
  content: z.string(),
  weight_version: z.number().int().nonnegative(),
  prev_length: z.number().int().nonnegative(),
  length: z.number().int().nonnegative(),
  prev_chain: z.string(),
  chain: z.string(),
  rows: z.array(committedRow),
});

const groupBase = {
  pk: z.string(),
  kind: z.literal('group'),
  writer: z.string(),
  attempt: z.string(),
  ttl: z.number(),
  at: z.number(),
};

const groupRecordSchema = z.discriminatedUnion('status', [
  z.object({ ...groupBase, status: z.literal('committed'), calls: z.array(committedCall) }),
  z.object({ ...groupBase, status: z.literal('aborted') }),
]);

const rowItemSchema = z.object({
  pk: z.string(),
  kind: z.literal('row'),
  group: z.string(),
  ttl: z.number(),
  data: z.instanceof(Uint8Array),
});

/** A group record as read from the table, or undefined when it is not one. */
export function parseGroupRecord(item: unknown): GroupRecord | undefined {
  const parsed = groupRecordSchema.safeParse(item);
  return parsed.success ? parsed.data : undefined;
}

export function parseRowItem(item: unknown): RowItemRecord | undefined {
  const parsed = rowItemSchema.safeParse(item);
  return parsed.success ? parsed.data : undefined;
}
