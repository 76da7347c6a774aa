/**
 * The checkpoint archive (docs/design.md#c2): a reference-backend checkpoint blob as the tar that
 * `tinker checkpoint download` extracts and `tinker checkpoint push-hf` uploads, a PEFT LoRA adapter:
 *
 *   adapter_config.json         PEFT's LoraConfig, true to the checkpoint (rank, alpha, base model)
 *   adapter_model.safetensors   the LoRA tensors under PEFT's names and layout
 *   checkpoint_complete         empty; push-hf refuses an archive without it
 *
 * The reference model (backend/reference/model.ts) adapts one projection: h' = h + (h A) B, with the
 * hidden state h a row vector, A [DIM, r] and B [r, DIM]. In PEFT terms that is a LoRA on a frozen
 * DIM -> DIM linear layer whose base weight is the identity, with scaling lora_alpha / r = 1. It is
 * named as a causal LM's decoder module would be (`model.hidden_proj`; embeddings `model.embed_tokens`
 * and the output projection `lm_head` are frozen and not in the adapter). PEFT's Linear computes
 * y = x W^T, so its factors are the transposes of ours:
 *
 *   base_model.model.model.hidden_proj.lora_A.weight   [r, DIM]   = A^T  (lora_A[k][i] = A[i][k])
 *   base_model.model.model.hidden_proj.lora_B.weight   [DIM, r]   = B^T  (lora_B[j][k] = B[k][j])
 *
 * Tensors are float64, the reference model's own precision, so the archive holds the checkpoint's exact
 * values. A training checkpoint's Adam moments are not part of an adapter and stay out. The tar's
 * mtime is the checkpoint's creation time, so one checkpoint always yields the same bytes.
 *
 * An engine's checkpoint (docs/engine-protocol.md, G5) is already a tar of a PEFT adapter, told from a
 * reference blob by its ustar magic: its `adapter_config.json` and `adapter_model.safetensors` are
 * served byte for byte, with the completion marker added and anything else (the optimizer state of a
 * training checkpoint) left out, so both kinds of checkpoint download as the same three files.
 */

import { BLOB_STATE, decodeBlob } from '../../backend/reference/codec.js';
import { DIM } from '../../backend/reference/model.js';
import type { ReferenceState } from '../../backend/reference/state.js';
import { InfrastructureError } from '../../base/errors.js';
import { type SafetensorsTensor, writeSafetensors } from './safetensors.js';
import { isTar, type RangeReader, readTar, readTarEntries, TAR_BLOCK, tarSegments, writeTar } from './tar.js';

export const ADAPTER_CONFIG_FILE = 'adapter_config.json';
export const ADAPTER_WEIGHTS_FILE = 'adapter_model.safetensors';
export const COMPLETE_MARKER_FILE = 'checkpoint_complete';

/** The adapted layer's name in PEFT's `target_modules` and its path in the (notional) base model. */
export const PEFT_TARGET_MODULE = 'hidden_proj';
export const PEFT_MODULE_PATH = `model.${PEFT_TARGET_MODULE}`;
/** PEFT's prefix of a saved adapter's keys: the PeftModel's `base_model` (LoraModel), then its `model`. */
const PEFT_KEY_PREFIX = 'base_model.model.';
export const LORA_A_TENSOR = `${PEFT_KEY_PREFIX}${PEFT_MODULE_PATH}.lora_A.weight`;
export const LORA_B_TENSOR = `${PEFT_KEY_PREFIX}${PEFT_MODULE_PATH}.lora_B.weight`;

/** The fields of PEFT's LoraConfig an adapter_config.json carries (PEFT fills in the ones left out). */
export interface PeftLoraConfig {
  readonly peft_type: 'LORA';
  readonly task_type: 'CAUSAL_LM';
  readonly base_model_name_or_path: string;
  readonly revision: null;
  readonly r: number;
  readonly lora_alpha: number;
  readonly lora_dropout: number;
  readonly target_modules: readonly string[];
  readonly bias: 'none';
  readonly fan_in_fan_out: boolean;
  readonly use_rslora: boolean;
  readonly use_dora: boolean;
  readonly init_lora_weights: boolean;
  readonly inference_mode: boolean;
  readonly modules_to_save: null;
  readonly layers_to_transform: null;
  readonly layers_pattern: null;
  readonly rank_pattern: Readonly<Record<string, number>>;
  readonly alpha_pattern: Readonly<Record<string, number>>;
}

export interface PeftAdapter {
  readonly config: PeftLoraConfig;
  readonly tensors: Readonly<Record<string, SafetensorsTensor>>;
}

/** The reference state's LoRA factors under PEFT's names, shapes and layout, and its LoraConfig. */
export function peftAdapter(state: ReferenceState): PeftAdapter {
  const { rank, params } = state;
  if (params.length !== 2 * DIM * rank) {
    throw new InfrastructureError(`reference adapter of rank ${rank} has ${params.length} values`);
  }
  const loraA = new Float64Array(rank * DIM);
  const loraB = new Float64Array(DIM * rank);
  const bOffset = DIM * rank;
  for (let i = 0; i < DIM; i++) {
    for (let k = 0; k < rank; k++) {
      // A[i][k] is params[i * rank + k]; B[k][i] is params[bOffset + k * DIM + i].
      loraA[k * DIM + i] = params[i * rank + k] as number;
      loraB[i * rank + k] = params[bOffset + k * DIM + i] as number;
    }
  }
  return {
    config: {
      peft_type: 'LORA',
      task_type: 'CAUSAL_LM',
      base_model_name_or_path: state.base_model,
      revision: null,
      r: rank,
      // The reference model adds (h A) B unscaled: PEFT's scaling lora_alpha / r must be 1.
      lora_alpha: rank,
      lora_dropout: 0,
      target_modules: [PEFT_TARGET_MODULE],
      bias: 'none',
      // Our factors are stored as PEFT's Linear expects (out x in), not transposed Conv1D-style.
      fan_in_fan_out: false,
      use_rslora: false,
      use_dora: false,
      init_lora_weights: true,
      inference_mode: true,
      modules_to_save: null,
      layers_to_transform: null,
      layers_pattern: null,
      rank_pattern: {},
      alpha_pattern: {},
    },
    tensors: {
      [LORA_A_TENSOR]: { dtype: 'F64', shape: [rank, DIM], data: loraA },
      [LORA_B_TENSOR]: { dtype: 'F64', shape: [DIM, rank], data: loraB },
    },
  };
}

/** JSON with keys sorted at every level, two-space indented, newline-terminated: stable bytes. */
function stableJson(value: unknown): string {
  const sortKeys = (item: unknown): unknown => {
    if (Array.isArray(item)) return item.map(sortKeys);
    if (item === null || typeof item !== 'object') return item;
    const entries = Object.entries(item as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1));
    return Object.fromEntries(entries.map(([key, inner]) => [key, sortKeys(inner)]));
  };
  return `${JSON.stringify(sortKeys(value), null, 2)}\n`;
}

export interface ArchiveOptions {
  /** The checkpoint's creation time (epoch milliseconds): every entry's mtime, in whole seconds. */
  readonly createdAtMs: number;
}

/**
 * The archive of a checkpoint blob (`save_weights` or `save_weights_for_sampler` output). A model-state
 * blob or bytes that are not a reference blob throw `InfrastructureError`: only checkpoints are archived.
 */
export function checkpointArchive(blob: Uint8Array, options: ArchiveOptions): Uint8Array {
  const { createdAtMs } = options;
  if (!Number.isFinite(createdAtMs) || createdAtMs < 0) {
    throw new InfrastructureError(`checkpoint creation time ${createdAtMs} is not an epoch time`);
  }
  if (isTar(blob)) return engineCheckpointArchive(blob, createdAtMs);
  const { type, state } = decodeBlob(blob);
  if (type === BLOB_STATE) throw new InfrastructureError('a model state blob is not a checkpoint to archive');
  const adapter = peftAdapter(state);
  // PEFT's save_pretrained marks its files "pt"; some loaders check the format before reading.
  const weights = writeSafetensors(adapter.tensors, { format: 'pt' });
  return writeTar(
    [
      { name: ADAPTER_CONFIG_FILE, data: new TextEncoder().encode(stableJson(adapter.config)) },
      { name: ADAPTER_WEIGHTS_FILE, data: weights },
      { name: COMPLETE_MARKER_FILE, data: new Uint8Array(0) },
    ],
    { mtimeSeconds: Math.floor(createdAtMs / 1000) },
  );
}

/** An engine's exported adapter (a tar): its two PEFT files as they are, plus the completion marker. */
function engineCheckpointArchive(blob: Uint8Array, createdAtMs: number): Uint8Array {
  const files = new Map(readTar(blob).map((file) => [file.name.replace(/^\.\//, ''), file.data]));
  const config = files.get(ADAPTER_CONFIG_FILE);
  const weights = files.get(ADAPTER_WEIGHTS_FILE);
  if (config === undefined || weights === undefined) throw lacksAdapterFiles([...files.keys()]);
  checkAdapterConfig(config);
  return writeTar(
    [
      { name: ADAPTER_CONFIG_FILE, data: config },
      { name: ADAPTER_WEIGHTS_FILE, data: weights },
      { name: COMPLETE_MARKER_FILE, data: new Uint8Array(0) },
    ],
    { mtimeSeconds: Math.floor(createdAtMs / 1000) },
  );
}

function lacksAdapterFiles(names: readonly string[]): InfrastructureError {
  return new InfrastructureError(
    `an engine checkpoint needs ${ADAPTER_CONFIG_FILE} and ${ADAPTER_WEIGHTS_FILE}; it holds ${names.join(', ') || 'nothing'}`,
  );
}

function checkAdapterConfig(config: Uint8Array): void {
  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder().decode(config));
  } catch (error) {
    throw new InfrastructureError(`the engine checkpoint's ${ADAPTER_CONFIG_FILE} is not JSON`, {
      cause: error,
    });
  }
  if (typeof (parsed as { base_model_name_or_path?: unknown })?.base_model_name_or_path !== 'string') {
    throw new InfrastructureError(
      `the engine checkpoint's ${ADAPTER_CONFIG_FILE} names no base_model_name_or_path`,
    );
  }
}

/** A range of the checkpoint blob an archive copies. */
export interface BlobRange {
  readonly offset: number;
  readonly length: number;
}

/** An archive as segments to concatenate: bytes made here, and ranges copied from the blob. */
export interface ArchivePlan {
  readonly size: number;
  readonly segments: readonly (Uint8Array | BlobRange)[];
}

/** An adapter_config.json larger than this is not a PEFT config. */
const MAX_CONFIG_BYTES = 1024 * 1024;

/**
 * `checkpointArchive` of a blob of `size` bytes read in ranges (a file of any size, S3 of
 * docs/design.md#s1): the same archive, as a plan whose adapter weights are a range of the blob,
 * so neither the blob nor the archive is ever whole in memory. A blob that is not a tar (a reference
 * blob, small) is read whole and archived as `checkpointArchive` does.
 */
export async function checkpointArchivePlan(
  read: RangeReader,
  size: number,
  options: ArchiveOptions,
): Promise<ArchivePlan> {
  const { createdAtMs } = options;
  if (!Number.isFinite(createdAtMs) || createdAtMs < 0) {
    throw new InfrastructureError(`checkpoint creation time ${createdAtMs} is not an epoch time`);
  }
  if (size < TAR_BLOCK || !isTar(await read(0, TAR_BLOCK))) {
    const whole = checkpointArchive(await read(0, size), options);
    return { size: whole.length, segments: [whole] };
  }
  const entries = new Map(
    (await readTarEntries(read, size)).map((entry) => [entry.name.replace(/^\.\//, ''), entry]),
  );
  const config = entries.get(ADAPTER_CONFIG_FILE);
  const weights = entries.get(ADAPTER_WEIGHTS_FILE);
  if (config === undefined || weights === undefined) throw lacksAdapterFiles([...entries.keys()]);
  if (config.size > MAX_CONFIG_BYTES) {
    throw new InfrastructureError(`the engine checkpoint's ${ADAPTER_CONFIG_FILE} is ${config.size} bytes`);
  }
  const configBytes = await read(config.offset, config.size);
  checkAdapterConfig(configBytes);
  return tarSegments<BlobRange | Uint8Array>(
    [
      { name: ADAPTER_CONFIG_FILE, size: config.size, data: configBytes },
      {
        name: ADAPTER_WEIGHTS_FILE,
        size: weights.size,
        data: { offset: weights.offset, length: weights.size },
      },
      { name: COMPLETE_MARKER_FILE, size: 0, data: new Uint8Array(0) },
    ],
    { mtimeSeconds: Math.floor(createdAtMs / 1000) },
  );
}
