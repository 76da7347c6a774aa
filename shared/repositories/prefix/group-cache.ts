import type { StoredItem } from './read-batcher.js';
import { type CommittedCall, type GroupRecord, parseGroupRecord } from './records.js';

/** A group record as a reader uses it: parsed, with its calls indexed by call and cut. */
export interface ParsedGroup {
  readonly record: GroupRecord;
  /** The record's entry for one call's cut, when it vouches for it. */
  entry(callId: string, cut: number): CommittedCall | undefined;
}

const entryKey = (callId: string, cut: number): string => `${cut}\u0000${callId}`;

function indexed(record: GroupRecord): ParsedGroup {
  const entries = new Map<string, CommittedCall>();
  if (record.status === 'committed') {
    for (const call of record.calls) {
      const key = entryKey(call.call, call.cut);
      if (!entries.has(key)) entries.set(key, call);
    }
  }
  return { record, entry: (callId, cut) => entries.get(entryKey(callId, cut)) };
}

/**
 * Group records parsed once per item read. Every restore in a batch gets the same item object for
 * a group record they share, so keying by the object parses (and indexes) each record once per batch,
 * where each restore used to parse its own copy; a later read yields new objects, so nothing parsed
 * from one read is ever used for another.
 */
export class GroupRecordCache {
  private readonly parsed = new WeakMap<StoredItem, ParsedGroup | null>();

  constructor(private readonly parse: (item: unknown) => GroupRecord | undefined = parseGroupRecord) {}

  /** The parsed record, or undefined when the item is not a well-formed group record. */
  get(item: StoredItem): ParsedGroup | undefined {
    let parsed = this.parsed.get(item);
    if (parsed === undefined) {
      const record = this.parse(item);
      parsed = record === undefined ? null : indexed(record);
      this.parsed.set(item, parsed);
    }
    return parsed ?? undefined;
  }
}
