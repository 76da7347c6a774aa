import { LIVE_BY_MODEL_INDEX, LIVE_INDEX } from '../../../shared/base/topology.js';
import { canonicalJson } from '../../../shared/repositories/payloads.js';

/**
 * Index lag, which DynamoDB Local never shows: a GSI is updated asynchronously, so a Query on it may
 * miss a row that was just written (it appears late) and still show a row that has already left it
 * (a terminal row lingers, with its old image). The lag is monotonic, as on AWS: a row once shown
 * is never hidden again while it is still in the index, and a lingering row once gone stays gone.
 */

export interface StaleIndexOptions {
  /** Indexes whose Query pages are made stale (default: both indexes a tick reads). */
  readonly indexes: readonly string[];
  /** The index's sort key, which names a row across pages (default `request_id`). */
  readonly sortKey: string;
  /** Rows remembered per queried partition; the oldest are forgotten first (default 256). */
  readonly memory: number;
}

export const DEFAULT_STALE_INDEX: StaleIndexOptions = {
  indexes: [LIVE_INDEX, LIVE_BY_MODEL_INDEX],
  sortKey: 'request_id',
  memory: 256,
};

type Item = Record<string, unknown>;

export interface QueryInput {
  readonly TableName?: string;
  readonly IndexName?: string;
  readonly Select?: string;
  readonly ExpressionAttributeValues?: unknown;
  readonly ExclusiveStartKey?: Item;
}

export interface QueryPage {
  readonly Items?: Item[];
  readonly Count?: number;
  readonly LastEvaluatedKey?: Item;
}

/** Says whether a fault of `kind` fires for the row named `row` (a seeded draw). */
export type RowDraw = (kind: 'lateRow' | 'lingeringRow', row: string) => boolean;

export class StaleIndex {
  /** Rows shown per partition (table, index, key values), in the order first shown. */
  private readonly shown = new Map<string, Map<string, Item>>();

  constructor(private readonly options: StaleIndexOptions) {}

  applies(input: QueryInput): boolean {
    return (
      input.IndexName !== undefined &&
      this.options.indexes.includes(input.IndexName) &&
      input.Select !== 'COUNT'
    );
  }

  /** The page a lagging index would have answered instead of `page`, with what was changed. */
  rewrite(
    input: QueryInput,
    page: QueryPage,
    draw: RowDraw,
  ): { page: QueryPage; late: number; lingering: number } {
    const partition = `${input.TableName}|${input.IndexName}|${canonicalJson(input.ExpressionAttributeValues ?? {})}`;
    let memory = this.shown.get(partition);
    if (memory === undefined) {
      memory = new Map();
      this.shown.set(partition, memory);
    }
    const from = this.keyOf(input.ExclusiveStartKey);
    const through = this.keyOf(page.LastEvaluatedKey);
    const inPage = (key: string) =>
      (from === undefined || key > from) && (through === undefined || key <= through);

    const items = page.Items ?? [];
    const present = new Set(items.map((item) => this.keyOf(item)));
    const answer: Item[] = [];
    let late = 0;
    let lingering = 0;
    for (const item of items) {
      const key = this.keyOf(item);
      if (key === undefined) {
        answer.push(item);
        continue;
      }
      // Only a row never shown can still be missing from the index.
      if (!memory.has(key) && draw('lateRow', key)) {
        late++;
        continue;
      }
      answer.push(item);
      this.remember(memory, key, item);
    }
    for (const [key, stale] of memory) {
      if (present.has(key) || !inPage(key)) continue;
      if (draw('lingeringRow', key)) {
        answer.push(stale);
        lingering++;
      } else {
        memory.delete(key);
      }
    }
    answer.sort((a, b) => compare(this.keyOf(a), this.keyOf(b)));
    return { page: { ...page, Items: answer, Count: answer.length }, late, lingering };
  }

  private remember(memory: Map<string, Item>, key: string, item: Item): void {
    memory.delete(key);
    memory.set(key, item);
    while (memory.size > this.options.memory) {
      const oldest = memory.keys().next().value;
      if (oldest === undefined) break;
      memory.delete(oldest);
    }
  }

  /** The sort key's value, from a document-client item or a marshalled one (`{S: ...}`). */
  private keyOf(item: Item | undefined): string | undefined {
    const value = item?.[this.options.sortKey];
    if (typeof value === 'string') return value;
    if (typeof value === 'object' && value !== null && typeof (value as { S?: unknown }).S === 'string') {
      return (value as { S: string }).S;
    }
    return undefined;
  }
}

function compare(a: string | undefined, b: string | undefined): number {
  if (a === b) return 0;
  if (a === undefined) return 1;
  if (b === undefined) return -1;
  return a < b ? -1 : 1;
}
