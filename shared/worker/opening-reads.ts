import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type { ModelRow, SampleClaimRecord } from '../domain/records.js';
import { readModels } from '../repositories/models.js';
import { readSampleClaims } from '../repositories/sample-claims.js';
import type { Tables } from '../repositories/tables.js';
import type { WorkItem } from '../scheduling/work-item.js';

/**
 * The strong reads each part of a work item starts with, made once for all its parts: the model rows
 * (does the row still name this work item as in flight? E1) and the samples' claims (still this work
 * item's? R4), each one BatchGetItem instead of one GetItem per part. They start with the work item,
 * as each part's own read did, so no part waits longer than before; what each part decides from its
 * row or claim is unchanged.
 */
export interface OpeningReads {
  readonly models: Promise<ReadonlyMap<string, ModelRow>>;
  readonly claims: Promise<ReadonlyMap<string, SampleClaimRecord>>;
}

export function openingReads(
  item: WorkItem,
  doc: DynamoDBDocumentClient,
  tables: Tables<'models' | 'registry'>,
): OpeningReads {
  const models: Promise<ReadonlyMap<string, ModelRow>> =
    item.models.length === 0
      ? Promise.resolve(new Map())
      : readModels(
          doc,
          tables.models,
          item.models.map((model) => model.model_id),
        );
  const claims: Promise<ReadonlyMap<string, SampleClaimRecord>> =
    item.samples.length === 0
      ? Promise.resolve(new Map())
      : readSampleClaims(
          doc,
          tables.registry,
          item.samples.map((sample) => sample.request_id),
        );
  // A failed read fails each part that awaits it (as its own read did), not the work item.
  models.catch(() => undefined);
  claims.catch(() => undefined);
  return { models, claims };
}
