import type { Backend, SamplerModel } from '../backend/backend.js';
import { storageKeys } from '../storage-keys.js';
import { checkpointBlob } from './checkpoint-source.js';
import type { WorkerClients } from './types.js';

/**
 * Samplers loaded once per work item: the bare base model, or a committed sampler checkpoint (R4: a
 * work item samples at most one checkpoint per model, so this holds few entries). A failed load is
 * dropped from the cache, so a later sample tries again.
 */
export class SamplerCache {
  readonly #loading = new Map<string, Promise<SamplerModel>>();

  constructor(
    private readonly backend: Backend,
    private readonly clients: WorkerClients,
    private readonly bucket: string,
  ) {}

  get(
    baseModel: string,
    checkpoint?: { readonly model_id: string; readonly content_id: string },
  ): Promise<SamplerModel> {
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

  async #load(
    baseModel: string,
    checkpoint: { readonly model_id: string; readonly content_id: string } | undefined,
  ): Promise<SamplerModel> {
    if (checkpoint === undefined) return this.backend.loadSampler(baseModel, null);
    const bytes = await checkpointBlob(
      this.clients,
      this.bucket,
      storageKeys.checkpoint(checkpoint.model_id, checkpoint.content_id),
      `${checkpoint.model_id}/${checkpoint.content_id}`,
    );
    return this.backend.loadSampler(baseModel, bytes);
  }
}
