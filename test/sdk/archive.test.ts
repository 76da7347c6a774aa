import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { DIM } from '../../shared/backend/reference/model.js';
import { asReferenceState } from '../../shared/backend/reference/state.js';
import {
  ADAPTER_CONFIG_FILE,
  ADAPTER_WEIGHTS_FILE,
  COMPLETE_MARKER_FILE,
  checkpointArchive,
  LORA_A_TENSOR,
  LORA_B_TENSOR,
  peftAdapter,
} from '../../shared/wire/archive/archive.js';
import { referenceBackend, trainedReferenceModel } from '../support/reference-checkpoint.js';
import { describeScenario } from './scenario.js';

/**
 * The checkpoint archive (C2's content) read by Python: tarfile, the SDK CLI's own download,
 * extraction and push-hf validation, and the `safetensors` package. The archive is built here from a
 * trained reference model's sampler checkpoint, as the worker's save_weights_for_sampler exports it.
 */

const RANK = 3;
const CREATED_AT_MS = Date.parse('2026-05-06T07:08:09.500Z');
const TINKER_PATH = 'tinker://run-archive/sampler_weights/final';

const state = asReferenceState(await trainedReferenceModel(RANK));
const archive = checkpointArchive(await referenceBackend.exportWeights(state, 'sampler'), {
  createdAtMs: CREATED_AT_MS,
});
const adapter = peftAdapter(state);
const archivePath = join(mkdtempSync(join(tmpdir(), 'sdk-archive-')), 'checkpoint.tar');
writeFileSync(archivePath, archive);

const FILES = [ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, COMPLETE_MARKER_FILE];

describeScenario(
  'archive',
  (report) => {
    it('tarfile finds three regular files at the root, stamped with the checkpoint’s creation time', () => {
      const { members } = report().observed<{
        members: { name: string; is_file: boolean; size: number; mode: number; mtime: number }[];
      }>('tarfile_reads_the_members');
      expect(members.map((member) => member.name)).toEqual(FILES);
      for (const member of members) {
        expect(member).toMatchObject({ is_file: true, mode: 0o644, mtime: Math.floor(CREATED_AT_MS / 1000) });
      }
      expect(members[2]?.size).toBe(0);
    });

    it('the SDK CLI’s download and safe extraction give the adapter folder', () => {
      const { files } = report().observed<{ files: [string, number][] }>('cli_download_extracts_the_adapter');
      expect(files.map(([name]) => name)).toEqual(FILES);
      expect(files[2]).toEqual([COMPLETE_MARKER_FILE, 0]);
    });

    it('safetensors loads the PEFT tensors with the names, shapes and exact values written here', () => {
      const observed = report().observed<{
        metadata: Record<string, string>;
        keys: string[];
        tensors: Record<string, { dtype: string; shape: number[]; values: number[] }>;
      }>('safetensors_loads_the_weights');
      expect(observed.metadata).toEqual({ format: 'pt' });
      expect(observed.keys.sort()).toEqual([LORA_A_TENSOR, LORA_B_TENSOR]);
      expect(observed.tensors[LORA_A_TENSOR]).toEqual({
        dtype: 'float64',
        shape: [RANK, DIM],
        values: [...(adapter.tensors[LORA_A_TENSOR]?.data ?? [])],
      });
      expect(observed.tensors[LORA_B_TENSOR]).toEqual({
        dtype: 'float64',
        shape: [DIM, RANK],
        values: [...(adapter.tensors[LORA_B_TENSOR]?.data ?? [])],
      });
      // The values are the checkpoint's: lora_A's row k is column k of A (params[i * rank + k]).
      expect(observed.tensors[LORA_A_TENSOR]?.values[DIM + 2]).toBe(state.params[2 * RANK + 1]);
    });

    it('adapter_config.json parses to the LoraConfig of the checkpoint', () => {
      const config = report().observed<Record<string, unknown>>('adapter_config_parses');
      expect(config).toEqual(adapter.config);
      expect(config).toMatchObject({
        peft_type: 'LORA',
        r: RANK,
        lora_alpha: RANK,
        base_model_name_or_path: 'reference/byte-lm',
      });
    });

    it('push-hf accepts the archive and would upload the adapter and a model card, not the marker', () => {
      const { repo_id, uploads } = report().observed<{
        repo_id: string;
        uploads: {
          repo_id: string;
          revision: string;
          files: string[];
          ignore_patterns: string[];
          adapter_config: Record<string, unknown>;
          readme_has_tinker_path: boolean;
        }[];
      }>('push_hf_accepts_the_archive');
      expect(repo_id).toBe('tinker-adapter-run-archive');
      expect(uploads).toHaveLength(1);
      const [upload] = uploads;
      expect(upload).toMatchObject({
        repo_id,
        revision: 'sampler_weights-final',
        readme_has_tinker_path: true,
      });
      expect(upload?.files).toEqual(['README.md', ...FILES]);
      expect(upload?.ignore_patterns).toContain(COMPLETE_MARKER_FILE);
      // base_model_name_or_path was already a string, so push-hf kept our config as it is.
      expect(upload?.adapter_config).toEqual(adapter.config);
    });

    it('push-hf refuses the same adapter without checkpoint_complete (its validation really runs)', () => {
      const { error } = report().observed<{ error: string | null }>(
        'push_hf_refuses_it_without_checkpoint_complete',
      );
      expect(error).toMatch(/missing 'checkpoint_complete'/);
    });
  },
  {
    timeoutMs: 60_000,
    env: { CHECKPOINT_ARCHIVE: archivePath, CHECKPOINT_TINKER_PATH: TINKER_PATH },
  },
);
