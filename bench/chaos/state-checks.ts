import { type DynamoDBDocumentClient, ScanCommand } from '@aws-sdk/lib-dynamodb';
import type { FutureRow, ModelRow } from '../../shared/domain/records.js';
import type { CommitEffects } from './effects.js';
import type { OracleRecord } from './equivalence.js';

/**
 * What the tables say at the end: every accepted request terminal (none lost), no request accepted
 * twice, every model settled with each of its seqs applied exactly once (R7), as the futures and
 * models tables and the observed commits show it.
 */

export async function scanAll<T>(doc: DynamoDBDocumentClient, table: string): Promise<T[]> {
  const items: T[] = [];
  let start: Record<string, unknown> | undefined;
  do {
    const page = await doc.send(
      new ScanCommand({ TableName: table, ConsistentRead: true, ExclusiveStartKey: start }),
    );
    items.push(...((page.Items ?? []) as T[]));
    start = page.LastEvaluatedKey;
  } while (start !== undefined);
  return items;
}

export interface StateReport {
  readonly accepted: number;
  readonly terminal: number;
  /** Accepted requests whose future is missing or still pending. */
  readonly lost: readonly string[];
  /** Futures nobody was given (a submit accepted twice). */
  readonly unexpected_futures: readonly string[];
  /** Futures ended, or model seqs applied, by more than one commit. */
  readonly duplicate_commits: readonly string[];
  /** Models not settled: in flight, planned != applied, or seqs not applied exactly once. */
  readonly unsettled_models: readonly string[];
  readonly duplicated_effects: number;
}

export async function checkState(input: {
  readonly doc: DynamoDBDocumentClient;
  readonly tables: { readonly futures: string; readonly models: string };
  readonly record: OracleRecord;
  readonly effects: CommitEffects;
}): Promise<{ report: StateReport; futures: Map<string, FutureRow>; models: Map<string, ModelRow> }> {
  const futures = new Map(
    (await scanAll<FutureRow>(input.doc, input.tables.futures)).map((row) => [row.request_id, row]),
  );
  const models = new Map(
    (await scanAll<ModelRow>(input.doc, input.tables.models)).map((row) => [row.model_id, row]),
  );
  const accepted = new Set(input.record.submissions.map((submission) => submission.request_id));
  const lost = [...accepted].filter((id) => {
    const status = futures.get(id)?.status;
    return status === undefined || status === 'pending';
  });
  const unexpected = [...futures.keys()].filter((id) => !accepted.has(id));

  const seqsByModel = new Map<string, number[]>();
  for (const row of futures.values()) {
    if (row.seq === undefined || row.request_type === 'sample') continue;
    const seqs = seqsByModel.get(row.model_id) ?? [];
    seqs.push(row.seq);
    seqsByModel.set(row.model_id, seqs);
  }
  const unsettled: string[] = [];
  const modelIds = new Set(
    input.record.submissions.flatMap((submission) => ('model_id' in submission ? [submission.model_id] : [])),
  );
  for (const modelId of modelIds) {
    const row = models.get(modelId);
    const seqs = (seqsByModel.get(modelId) ?? []).sort((a, b) => a - b);
    const last = seqs.length;
    const contiguous = seqs.every((seq, index) => seq === index + 1);
    const problems = [
      row === undefined && 'no model row',
      row?.inflight !== undefined && `still in flight (${row?.inflight})`,
      row !== undefined &&
        row.applied_through !== last &&
        `applied_through ${row.applied_through} != ${last}`,
      row !== undefined &&
        row.planned_through !== row.applied_through &&
        `planned_through ${row.planned_through}`,
      !contiguous && 'seqs not contiguous from 1',
      input.effects.appliedSeqs(modelId) !== last &&
        `commits applied ${input.effects.appliedSeqs(modelId)} seqs`,
    ].filter((problem): problem is string => typeof problem === 'string');
    if (problems.length > 0) unsettled.push(`${modelId}: ${problems.join(', ')}`);
  }

  const duplicateCommits = [...input.effects.duplicateFutures(), ...input.effects.duplicateSeqs()];
  return {
    futures,
    models,
    report: {
      accepted: accepted.size,
      terminal: accepted.size - lost.length,
      lost,
      unexpected_futures: unexpected,
      duplicate_commits: duplicateCommits,
      unsettled_models: unsettled,
      duplicated_effects: duplicateCommits.length + unexpected.length,
    },
  };
}
