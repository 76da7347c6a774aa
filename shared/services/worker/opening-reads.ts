import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type { WorkItem, WorkItemPartIds } from '../../domain/planning/work-item.js';
import type { ModelRow, SampleClaimRecord } from '../../domain/records.js';
import { readModels } from '../../repositories/models.js';
import { readSampleClaims } from '../../repositories/samples/claims.js';
import type { Tables } from '../../repositories/tables.js';
import { readPrefixRefs } from './sample-resume.js';

/**
 * The strong reads each part of a work item starts with, made once for all its parts: the model rows
 * (does the row still name this work item as in flight? E1), the samples' claims (still this work
 * item's? R4) and their prefix pointers (P4), each one BatchGetItem instead of one GetItem per part. They start while the work item
 * is fetched when its manifest names the parts (`manifestOf`), else once it is loaded, as each part's
 * own read did; what each part decides from its row or claim is unchanged.
 */
export interface OpeningReads {
  readonly models: Promise<ReadonlyMap<string, ModelRow>>;
  readonly claims: Promise<ReadonlyMap<string, SampleClaimRecord>>;
  /** The samples' futures' `prefix_ref`s: where each resumes (./sample-resume.ts, P4). */
  readonly prefixRefs: Promise<ReadonlyMap<string, Record<string, unknown>>>;
}

/** Whether reads started for `read` cover every part of `item` (a manifest's ids against its item's). */
export function covers(read: WorkItemPartIds, item: WorkItem): boolean {
  const models = new Set(read.model_ids);
  const samples = new Set(read.sample_ids);
  return (
    item.models.every((model) => models.has(model.model_id)) &&
    item.samples.every((sample) => samples.has(sample.request_id))
  );
}

export function openingReads(
  ids: WorkItemPartIds,
  doc: DynamoDBDocumentClient,
  tables: Tables<'futures' | 'models' | 'registry'>,
): OpeningReads {
  const models: Promise<ReadonlyMap<string, ModelRow>> =
    ids.model_ids.length === 0 ? Promise.resolve(new Map()) : readModels(doc, tables.models, ids.model_ids);
  const claims: Promise<ReadonlyMap<string, SampleClaimRecord>> =
    ids.sample_ids.length === 0
      ? Promise.resolve(new Map())
      : readSampleClaims(doc, tables.registry, ids.sample_ids);
  const prefixRefs: Promise<ReadonlyMap<string, Record<string, unknown>>> =
    ids.sample_ids.length === 0
      ? Promise.resolve(new Map())
      : readPrefixRefs(doc, tables.futures, ids.sample_ids);
  // A failed read fails each part that awaits it (as its own read did), not the work item.
  for (const read of [models, claims, prefixRefs]) read.catch(() => undefined);
  return { models, claims, prefixRefs };
}
