import { z } from 'zod';
import { storageKeys } from '../../base/storage-keys.js';
import { TRAINING_REQUEST_TYPES } from '../records.js';
import { inflightToken } from './claim.js';

/**
 * The work item: what one tick dispatched, written to S3 under `work/<id>.json`; SQS carries only
 * the small manifest naming it (docs/design.md#limits: queues hold manifests, S3 holds batches).
 *
 * Fail steps. A model's step may carry `fail`: the worker then records that error as the step's
 * outcome in the model's commit, reads no payload for it and changes no model state. The scheduler
 * or sweeper dispatches fail steps where a training row must end without running (R5: only
 * planned work ends a training row, so the model's index never shows a gap that stalls it):
 * requests after a model was unloaded (user error), a request whose payload is missing (server
 * error), and a model's next step after K failed attempts (E2, server error, dispatched alone).
 * A sample whose payload is missing is dispatched the same way, as a sample entry with `fail`.
 */

const futureErrorSchema = z.object({
  message: z.string().min(1),
  category: z.enum(['user', 'server']),
});

/**
 * A step or a sample: its request, what `shape` adds, the parsed request JSON (`payload`) and `fail`;
 * the payload is absent only on an entry dispatched to be failed (`missingPayload` says so).
 */
function dispatchedEntry<Shape extends z.ZodRawShape>(shape: Shape, missingPayload: string) {
  return z
    .object({
      request_id: z.string().min(1),
      ...shape,
      payload: z.unknown().optional(),
      fail: futureErrorSchema.optional(),
    })
    .refine(hasPayloadUnlessFailed, { message: missingPayload, path: ['payload'] });
}

function hasPayloadUnlessFailed(entry: { readonly fail?: unknown; readonly payload?: unknown }): boolean {
  return entry.fail !== undefined || entry.payload !== undefined;
}

export const workItemStepSchema = dispatchedEntry(
  { seq: z.number().int().positive(), request_type: z.enum(TRAINING_REQUEST_TYPES) },
  'A step that is not a fail step needs its payload',
);

export const workItemModelSchema = z
  .object({
    model_id: z.string().min(1),
    tenant: z.string().min(1),
    /** The epoch of the claim (the new one). */
    epoch: z.number().int().nonnegative(),
    /** `<model_id>@<epoch>`: the commit is conditional on it (E4). */
    inflight: z.string().min(1),
    base_applied_through: z.number().int().nonnegative(),
    /** The committed state to load (E3); absent before create_model commits. */
    base_state_ref: z.string().min(1).optional(),
    steps: z.array(workItemStepSchema).min(1),
  })
  .superRefine((model, ctx) => {
    if (model.inflight !== inflightToken(model.model_id, model.epoch)) {
      ctx.addIssue({ code: 'custom', message: 'inflight must be <model_id>@<epoch>', path: ['inflight'] });
    }
    // A worker must never run a gapped or reordered run (R1, R5).
    model.steps.forEach((step, index) => {
      if (step.seq !== model.base_applied_through + 1 + index) {
        ctx.addIssue({
          code: 'custom',
          message: 'steps must be contiguous seqs from base_applied_through + 1',
          path: ['steps', index, 'seq'],
        });
      }
    });
  });

/**
 * A sample's `fail` is set when it is dispatched only to be failed (its payload is missing): the
 * worker commits this error under the sample's claim, like any outcome. The scheduler may not write
 * request rows (R5, R6; its grant on the futures table is read-only).
 */
export const workItemSampleSchema = dispatchedEntry(
  {
    tenant: z.string().min(1),
    /** The checkpoint's model, or `base:<base_model>`. */
    model_id: z.string().min(1),
    checkpoint_id: z.string().min(1).optional(),
    /** The per-request claim this work item holds (R4). */
    claim_token: z.string().min(1),
  },
  'A sample that is not a fail entry needs its payload',
);

export const workItemSchema = z
  .object({
    work_item_id: z.string().min(1),
    pool: z.string().min(1),
    created_at: z.number().int().nonnegative(),
    models: z.array(workItemModelSchema),
    samples: z.array(workItemSampleSchema),
  })
  .superRefine((item, ctx) => {
    if (item.models.length === 0 && item.samples.length === 0) {
      ctx.addIssue({ code: 'custom', message: 'A work item holds at least one step or sample', path: [] });
    }
    const modelIds = new Set<string>();
    item.models.forEach((model, index) => {
      if (modelIds.has(model.model_id)) {
        ctx.addIssue({
          code: 'custom',
          message: 'A model appears once per work item',
          path: ['models', index],
        });
      }
      modelIds.add(model.model_id);
    });
    const requestIds = new Set<string>();
    const ids = [
      ...item.models.flatMap((model) => model.steps.map((step) => step.request_id)),
      ...item.samples.map((sample) => sample.request_id),
    ];
    for (const id of ids) {
      if (requestIds.has(id))
        ctx.addIssue({ code: 'custom', message: `Request ${id} appears twice`, path: [] });
      requestIds.add(id);
    }
    const checkpointOf = new Map<string, string>();
    item.samples.forEach((sample, index) => {
      if (sample.checkpoint_id === undefined) return;
      const chosen = checkpointOf.get(sample.model_id);
      if (chosen !== undefined && chosen !== sample.checkpoint_id) {
        ctx.addIssue({
          code: 'custom',
          message: 'A work item samples at most one checkpoint per model (R4)',
          path: ['samples', index, 'checkpoint_id'],
        });
      }
      checkpointOf.set(sample.model_id, chosen ?? sample.checkpoint_id);
    });
  });

export type WorkItemStep = z.infer<typeof workItemStepSchema>;
export type WorkItemModel = z.infer<typeof workItemModelSchema>;
export type WorkItemSample = z.infer<typeof workItemSampleSchema>;
export type WorkItem = z.infer<typeof workItemSchema>;

/**
 * The SQS message: names the work item and, optionally, the ids of its parts (ids only: at most
 * `maxWorkItemRequests` of them, a few KB), so the worker starts its strong reads of their model rows
 * and sample claims while it GETs the work item instead of after (shared/services/worker/opening-reads.ts).
 * The work item stays the authority: a manifest without the ids, or whose ids differ, costs only that
 * overlap.
 */
export const workManifestSchema = z.object({
  work_item_id: z.string().min(1),
  key: z.string().min(1),
  model_ids: z.array(z.string().min(1)).optional(),
  sample_ids: z.array(z.string().min(1)).optional(),
});
export type WorkManifest = z.infer<typeof workManifestSchema>;

export function manifestFor(workItemId: string): WorkManifest {
  return { work_item_id: workItemId, key: storageKeys.workItem(workItemId) };
}

/** A work item's parts by id: what its manifest names of it (`manifestOf`). */
export type WorkItemPartIds = Required<Pick<WorkManifest, 'model_ids' | 'sample_ids'>>;

export function partIdsOf(item: WorkItem): WorkItemPartIds {
  return {
    model_ids: item.models.map((model) => model.model_id),
    sample_ids: item.samples.map((sample) => sample.request_id),
  };
}

/** The manifest the scheduler sends for a written work item: its name and its parts' ids. */
export function manifestOf(item: WorkItem): WorkManifest {
  return { ...manifestFor(item.work_item_id), ...partIdsOf(item) };
}
