import { type AwsClients, awsClients } from '../../aws/clients.js';
import type { ModelClaim, ModelRelease, SampleRelease } from '../../domain/planning/claim.js';
import type { WorkItem, WorkManifest } from '../../domain/planning/work-item.js';
import type { LiveRow, ModelRow, SampleClaimRecord } from '../../domain/records.js';
import { readSampleRows, type SampleRowFacts } from '../../repositories/futures.js';
import { queryLiveOfModels, scanLiveIndex } from '../../repositories/live-index.js';
import { claimModel, readModels, releaseModel } from '../../repositories/models.js';
import { type PayloadReads, readPayloads } from '../../repositories/payloads.js';
import { claimSamples, readLiveSampleClaims, releaseSampleClaim } from '../../repositories/samples/claims.js';
import { isPoolDraining } from '../ops/control-store.js';
import { sendManifest, writeWorkItem } from './dispatch.js';
import type { SchedulerSettings } from './settings.js';
import { type TickLock, tickLock } from './tick-lock.js';

/**
 * Everything a tick reads and writes, behind one narrow interface. The defaults talk to AWS through
 * the given clients; tests wrap single members (an index that lags, a send that crashes).
 */
export interface SchedulerAdapters {
  scanLive(): Promise<{ rows: LiveRow[]; pages: number }>;
  /** The pending entries of exactly these models (`live_by_model`), for an incremental tick (R5). */
  readLiveOf(modelIds: Iterable<string>): Promise<{ rows: LiveRow[]; pages: number }>;
  readModels(modelIds: Iterable<string>): Promise<Map<string, ModelRow>>;
  readSampleClaims(requestIds: Iterable<string>, now: number): Promise<Set<string>>;
  claimModel(claim: ModelClaim): Promise<boolean>;
  /** Each sample's conditional claim (R4), in shared transactions where they all land; in order. */
  claimSamples(claims: readonly Omit<SampleClaimRecord, 'pk' | 'ttl'>[], now: number): Promise<boolean[]>;
  /** Gives back a model claim a failed pass could not dispatch; `false` when its condition failed. */
  releaseModel(release: ModelRelease): Promise<boolean>;
  /** Deletes a sample claim a failed pass could not dispatch; `false` when it is no longer the pass's. */
  releaseSample(release: SampleRelease): Promise<boolean>;
  readSampleRows(requestIds: Iterable<string>): Promise<Map<string, SampleRowFacts>>;
  readPayloads(requestIds: readonly string[]): Promise<PayloadReads>;
  writeWorkItem(workItem: WorkItem): Promise<number>;
  /** To the shared `work` queue, or to a holder's lane (S2). */
  sendManifest(manifest: WorkManifest, lane?: number): Promise<void>;
  /** The operator's `drain` switch for the pool: while on, ticks read and report but dispatch nothing. */
  isDraining(): Promise<boolean>;
  readonly lock: TickLock;
}

export type SchedulerClients = Pick<AwsClients, 'doc' | 's3' | 'sqs'>;

export function schedulerAdapters(
  settings: SchedulerSettings,
  clients: SchedulerClients = awsClients(),
): SchedulerAdapters {
  const { doc, s3, sqs } = clients;
  const { tables } = settings;
  return {
    scanLive: () => scanLiveIndex(doc, tables.futures, settings.pool, settings.liveShards),
    readLiveOf: (ids) => queryLiveOfModels(doc, tables.futures, settings.pool, ids),
    readModels: (ids) => readModels(doc, tables.models, ids),
    readSampleClaims: (ids, now) => readLiveSampleClaims(doc, tables.registry, ids, now),
    claimModel: (claim) => claimModel(doc, tables.models, claim),
    claimSamples: (claims, now) => claimSamples(doc, tables.registry, claims, now),
    releaseModel: (release) => releaseModel(doc, tables.models, release),
    releaseSample: (release) =>
      releaseSampleClaim(doc, tables.registry, release.request_id, release.condition.claim_token),
    readSampleRows: (ids) => readSampleRows(doc, tables.futures, ids),
    readPayloads: (ids) => readPayloads(s3, settings.bucket, ids),
    writeWorkItem: (workItem) => writeWorkItem(s3, settings.bucket, workItem),
    sendManifest: (manifest, lane) =>
      sendManifest(sqs, lane === undefined ? settings.workQueueUrl : settings.laneQueueUrl(lane), manifest),
    isDraining: () => isPoolDraining(doc, tables.registry, settings.pool),
    lock: tickLock(doc, tables.registry, settings.pool),
  };
}
