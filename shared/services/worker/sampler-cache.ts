import type { Backend, SamplerModel } from '../../backend/backend.js';
import type { CheckpointNameRecord } from '../../domain/records.js';
import { readCheckpointName } from '../../repositories/checkpoints/names.js';
import { checkpointBlob } from './checkpoint-source.js';
import { discardBlob, fetchesToFiles, loadSamplerBlob } from './state-blobs.js';
import type { WorkerClients } from './types.js';

export interface SamplerCheckpoint {
  readonly model_id: string;
  readonly content_id: string;
  readonly blob_key: string;
}

/**
 * Samplers loaded once per work item: the bare base model, or a committed sampler checkpoint (R4: a
 * work item samples at most one checkpoint per model, so this holds few entries). A failed load is
 * dropped from the cache, so a later sample tries again. The checkpoints' name records are read once
 * per work item too: every sample of a checkpoint checks it is still live (C3-C5), and they share one
 * strongly consistent read instead of one each.
 */
export class SamplerCache {
  readonly #loading = new Map<string, Promise<SamplerModel>>();
  readonly #names = new Map<string, Promise<CheckpointNameRecord | undefined>>();

  constructor(
    private readonly backend: Backend,
    private readonly clients: WorkerClients,
    private readonly bucket: string,
    private readonly registryTable: string,
  ) {}

  /** A checkpoint name record, read strongly once for this work item (a failed read is retried). */
  checkpointName(pk: string): Promise<CheckpointNameRecord | undefined> {
    let reading = this.#names.get(pk);
    if (reading === undefined) {
      reading = readCheckpointName(this.clients.doc, this.registryTable, pk);
      this.#names.set(pk, reading);
      reading.catch(() => this.#names.delete(pk));
    }
    return reading;
  }

  /** `checkpoint.blob_key`: the blob its committed name record names (`requireLiveSamplerCheckpoint`). */
  get(baseModel: string, checkpoint?: SamplerCheckpoint): Promise<SamplerModel> {
    const key =
      checkpoint === undefined
        ? `base\u0000${baseModel}`
        : `${checkpoint.model_id}\u0000${checkpoint.content_id}`;
    let loading = this.#loading.get(key);
    if (loading === undefined) {
      loading = this.#load(baseModel, checkpoint);
      this.#loading.set(key, loading);
      loading.catch(() => this.#loading.delete(key));
    }
    return loading;
  }

  async #load(baseModel: string, checkpoint: SamplerCheckpoint | undefined): Promise<SamplerModel> {
    if (checkpoint === undefined) return this.backend.loadSampler(baseModel, null);
    const blob = await checkpointBlob(
      this.clients,
      this.bucket,
      checkpoint.blob_key,
      `${checkpoint.model_id}/${checkpoint.content_id}`,
      await fetchesToFiles(this.backend),
    );
    try {
      return await loadSamplerBlob(this.backend, baseModel, blob);
    } finally {
      await discardBlob(blob);
    }
  }
}
