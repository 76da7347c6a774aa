import { describe, expect, it } from 'vitest';
import { BLOB_SAMPLER_WEIGHTS, encodeBlob } from '../../shared/backend/reference/codec.js';
import { DIM } from '../../shared/backend/reference/model.js';
import { asReferenceState, type ReferenceState } from '../../shared/backend/reference/state.js';
import { InfrastructureError } from '../../shared/base/errors.js';
import {
  ADAPTER_CONFIG_FILE,
  ADAPTER_WEIGHTS_FILE,
  COMPLETE_MARKER_FILE,
  checkpointArchive,
  checkpointArchivePlan,
  LORA_A_TENSOR,
  LORA_B_TENSOR,
  PEFT_TARGET_MODULE,
  peftAdapter,
} from '../../shared/wire/archive/archive.js';
import { writeTar } from '../../shared/wire/archive/tar.js';
import { readSafetensors, readTar } from '../support/checkpoint-readers.js';
import { referenceBackend, trainedReferenceModel } from '../support/reference-checkpoint.js';
import { seededRandom } from '../support/seeded-random.js';

const backend = referenceBackend;
const BASE = 'Qwen/Qwen3-4B';
const CREATED_AT_MS = Date.parse('2026-03-04T05:06:07.890Z');

const trainedModel = (rank: number) => trainedReferenceModel(rank, { baseModel: BASE });

/** The reference model's adapted hidden state h + (h A) B, from the state's own layout. */
function referenceAdapted(state: ReferenceState, h: Float64Array): Float64Array {
  const { rank, params } = state;
  const low = new Float64Array(rank);
  for (let k = 0; k < rank; k++) {
    for (let i = 0; i < DIM; i++)
      low[k] = (low[k] as number) + (h[i] as number) * (params[i * rank + k] as number);
  }
  const out = Float64Array.from(h);
  for (let j = 0; j < DIM; j++) {
    for (let k = 0; k < rank; k++) {
      out[j] = (out[j] as number) + (low[k] as number) * (params[DIM * rank + k * DIM + j] as number);
    }
  }
  return out;
}

/** PEFT's LoRA forward on an identity base layer: x + (lora_alpha / r) * lora_B (lora_A x). */
function peftAdapted(
  a: readonly number[],
  b: readonly number[],
  r: number,
  alpha: number,
  x: Float64Array,
): Float64Array {
  const low = new Float64Array(r);
  for (let k = 0; k < r; k++)
    for (let i = 0; i < DIM; i++) low[k] = (low[k] as number) + (a[k * DIM + i] as number) * (x[i] as number);
  const out = Float64Array.from(x);
  for (let j = 0; j < DIM; j++) {
    let acc = 0;
    for (let k = 0; k < r; k++) acc += (b[j * r + k] as number) * (low[k] as number);
    out[j] = (out[j] as number) + (alpha / r) * acc;
  }
  return out;
}

describe('the PEFT mapping of the reference adapter', () => {
  it('names the factors as PEFT does, lora_A [r, in] = A transposed and lora_B [out, r] = B transposed', async () => {
    const state = asReferenceState(await trainedModel(3));
    const { tensors } = peftAdapter(state);
    expect(Object.keys(tensors).sort()).toEqual([
      'base_model.model.model.hidden_proj.lora_A.weight',
      'base_model.model.model.hidden_proj.lora_B.weight',
    ]);
    const a = tensors[LORA_A_TENSOR];
    const b = tensors[LORA_B_TENSOR];
    expect(a?.shape).toEqual([3, DIM]);
    expect(b?.shape).toEqual([DIM, 3]);
    for (let i = 0; i < DIM; i++) {
      for (let k = 0; k < 3; k++) {
        expect(a?.data[k * DIM + i]).toBe(state.params[i * 3 + k]);
        expect(b?.data[i * 3 + k]).toBe(state.params[3 * DIM + k * DIM + i]);
      }
    }
    // Training moved B off zero, so the B check above compared real values.
    expect(b?.data.some((value) => value !== 0)).toBe(true);
  });

  it('computes what the reference model computes when PEFT applies it with the config’s scaling', async () => {
    const state = asReferenceState(await trainedModel(4));
    const { tensors, config } = peftAdapter(state);
    const random = seededRandom(11);
    for (let trial = 0; trial < 5; trial++) {
      const h = Float64Array.from({ length: DIM }, () => random() * 2 - 1);
      const peft = peftAdapted(
        [...(tensors[LORA_A_TENSOR]?.data ?? [])],
        [...(tensors[LORA_B_TENSOR]?.data ?? [])],
        config.r,
        config.lora_alpha,
        h,
      );
      const reference = referenceAdapted(state, h);
      for (let j = 0; j < DIM; j++) expect(peft[j]).toBeCloseTo(reference[j] as number, 12);
    }
  });

  it('writes a LoraConfig true to the checkpoint, its target module the suffix of the tensor names', async () => {
    const state = asReferenceState(await trainedModel(5));
    const { config } = peftAdapter(state);
    expect(config).toMatchObject({
      peft_type: 'LORA',
      task_type: 'CAUSAL_LM',
      base_model_name_or_path: BASE,
      r: 5,
      lora_alpha: 5,
      target_modules: [PEFT_TARGET_MODULE],
      bias: 'none',
      fan_in_fan_out: false,
      use_dora: false,
      use_rslora: false,
    });
    // PEFT matches a target module against the end of each module's path.
    expect(LORA_A_TENSOR.replace(/\.lora_A\.weight$/, '').endsWith(`.${PEFT_TARGET_MODULE}`)).toBe(true);
  });
});

describe('checkpointArchive', () => {
  it('holds adapter_config.json, adapter_model.safetensors and an empty checkpoint_complete at its root', async () => {
    const state = await trainedModel(2);
    const archive = checkpointArchive(await backend.exportWeights(state, 'sampler'), {
      createdAtMs: CREATED_AT_MS,
    });
    const entries = readTar(archive);
    expect(entries.map((entry) => entry.name)).toEqual([
      ADAPTER_CONFIG_FILE,
      ADAPTER_WEIGHTS_FILE,
      COMPLETE_MARKER_FILE,
    ]);
    for (const entry of entries) {
      expect(entry).toMatchObject({ typeflag: '0', mode: 0o644, mtime: Math.floor(CREATED_AT_MS / 1000) });
    }
    expect(entries[2]?.size).toBe(0);
    const config = JSON.parse(new TextDecoder().decode(entries[0]?.data)) as Record<string, unknown>;
    expect(config).toEqual(peftAdapter(asReferenceState(state)).config);
    const weights = readSafetensors(entries[1]?.data ?? new Uint8Array());
    expect(weights.metadata).toEqual({ format: 'pt' });
    const { params } = asReferenceState(state);
    expect(weights.tensors[LORA_A_TENSOR]).toMatchObject({ dtype: 'F64', shape: [2, DIM] });
    // Float64 all the way: the archive carries the checkpoint's exact values.
    expect(weights.tensors[LORA_A_TENSOR]?.values[1]).toBe(params[2]);
    expect(weights.tensors[LORA_B_TENSOR]?.values[DIM + 1]).toBe(params[2 * DIM + 1 * DIM + 8]);
  });

  it('gives one checkpoint the same bytes every time, and leaves a training checkpoint’s moments out', async () => {
    const state = await trainedModel(3);
    const training = await backend.exportWeights(state, 'training');
    const sampler = await backend.exportWeights(state, 'sampler');
    expect(training.length).toBeGreaterThan(sampler.length);
    const once = checkpointArchive(training, { createdAtMs: CREATED_AT_MS });
    expect(checkpointArchive(Uint8Array.from(training), { createdAtMs: CREATED_AT_MS })).toEqual(once);
    expect(checkpointArchive(sampler, { createdAtMs: CREATED_AT_MS })).toEqual(once);
    // Another creation time or other weights change the bytes.
    expect(checkpointArchive(training, { createdAtMs: CREATED_AT_MS + 1000 })).not.toEqual(once);
    const moved = asReferenceState(state);
    const changed = encodeBlob(BLOB_SAMPLER_WEIGHTS, {
      ...moved,
      params: moved.params.map((value, i) => (i === 0 ? value + 1 : value)),
    });
    expect(checkpointArchive(changed, { createdAtMs: CREATED_AT_MS })).not.toEqual(once);
  });

  it('refuses a model state blob, bytes that are not a blob and a bad creation time', async () => {
    const state = await trainedModel(2);
    const stateBlob = await backend.serializeState(state);
    expect(() => checkpointArchive(stateBlob, { createdAtMs: CREATED_AT_MS })).toThrow(/not a checkpoint/);
    expect(() =>
      checkpointArchive(new TextEncoder().encode('not a blob at all, not at all'), { createdAtMs: 0 }),
    ).toThrow(InfrastructureError);
    const sampler = await backend.exportWeights(state, 'sampler');
    expect(() => checkpointArchive(sampler, { createdAtMs: Number.NaN })).toThrow(InfrastructureError);
  });

  it('serves an engine checkpoint (a PEFT adapter tar, G5) as it is, with the marker and without the optimizer', () => {
    const config = new TextEncoder().encode('{"base_model_name_or_path": "/models/tiny-llama", "r": 8}');
    const weights = Uint8Array.from({ length: 700 }, (_, i) => (i * 7) % 251);
    const engineExport = writeTar(
      [
        { name: ADAPTER_CONFIG_FILE, data: config },
        { name: ADAPTER_WEIGHTS_FILE, data: weights },
        { name: 'optimizer.safetensors', data: new Uint8Array(1300).fill(3) },
      ],
      { mtimeSeconds: 1 },
    );
    const archive = checkpointArchive(engineExport, { createdAtMs: CREATED_AT_MS });
    const entries = readTar(archive);
    expect(entries.map((entry) => entry.name)).toEqual([
      ADAPTER_CONFIG_FILE,
      ADAPTER_WEIGHTS_FILE,
      COMPLETE_MARKER_FILE,
    ]);
    expect(entries[0]?.data).toEqual(config);
    expect(entries[1]?.data).toEqual(weights);
    expect(entries.every((entry) => entry.mtime === Math.floor(CREATED_AT_MS / 1000))).toBe(true);
    expect(checkpointArchive(engineExport, { createdAtMs: CREATED_AT_MS })).toEqual(archive);
  });

  it('refuses an engine tar without the adapter files or its base model', () => {
    const only = (name: string, data: Uint8Array) => writeTar([{ name, data }], { mtimeSeconds: 0 });
    expect(() => checkpointArchive(only('notes.txt', new Uint8Array(3)), { createdAtMs: 0 })).toThrow(
      /needs adapter_config.json and adapter_model.safetensors; it holds notes.txt/,
    );
    const noBase = writeTar(
      [
        { name: ADAPTER_CONFIG_FILE, data: new TextEncoder().encode('{"r": 8}') },
        { name: ADAPTER_WEIGHTS_FILE, data: new Uint8Array(8) },
      ],
      { mtimeSeconds: 0 },
    );
    expect(() => checkpointArchive(noBase, { createdAtMs: 0 })).toThrow(/names no base_model_name_or_path/);
  });
});

describe('checkpointArchivePlan', () => {
  /** The plan's bytes, ranges read from `blob`, and how many bytes of the blob were read to plan it. */
  async function planned(blob: Uint8Array, createdAtMs: number) {
    let read = 0;
    const plan = await checkpointArchivePlan(
      async (offset, length) => {
        read += length;
        return blob.slice(offset, offset + length);
      },
      blob.length,
      { createdAtMs },
    );
    const parts = plan.segments.map((segment) =>
      segment instanceof Uint8Array
        ? segment
        : blob.subarray(segment.offset, segment.offset + segment.length),
    );
    const bytes = new Uint8Array(Buffer.concat(parts));
    expect(bytes.length).toBe(plan.size);
    return { bytes, read, plan };
  }

  it('is the archive checkpointArchive writes, its weights a range of the blob it never reads', async () => {
    const config = new TextEncoder().encode('{"base_model_name_or_path": "/models/tiny-llama", "r": 8}');
    const weights = Uint8Array.from({ length: 70_000 }, (_, i) => (i * 7) % 251);
    const engineExport = writeTar(
      [
        { name: ADAPTER_CONFIG_FILE, data: config },
        { name: ADAPTER_WEIGHTS_FILE, data: weights },
        { name: 'optimizer.safetensors', data: new Uint8Array(130_000).fill(3) },
      ],
      { mtimeSeconds: 1 },
    );
    const { bytes, read, plan } = await planned(engineExport, CREATED_AT_MS);
    expect(bytes).toEqual(checkpointArchive(engineExport, { createdAtMs: CREATED_AT_MS }));
    expect(plan.segments).toContainEqual({ offset: expect.any(Number), length: weights.length });
    // The first block twice (the tar check, then its header), the other headers, the end block and
    // the config: neither the weights nor the optimizer file.
    expect(read).toBe(5 * 512 + config.length);
  });

  it('archives a reference blob whole, and refuses what checkpointArchive refuses', async () => {
    const state = await trainedModel(2);
    const sampler = await backend.exportWeights(state, 'sampler');
    expect((await planned(sampler, CREATED_AT_MS)).bytes).toEqual(
      checkpointArchive(sampler, { createdAtMs: CREATED_AT_MS }),
    );
    const only = writeTar([{ name: 'notes.txt', data: new Uint8Array(3) }], { mtimeSeconds: 0 });
    await expect(planned(only, 0)).rejects.toThrow(/it holds notes.txt/);
  });
});
