import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { CreateBucketCommand, DeleteObjectCommand } from '@aws-sdk/client-s3';
import { localAwsClients } from '../local/cloud/aws-clients.js';
import type { CloudEndpoints } from '../local/cloud/cloud.js';
import type { BackendState, FileBlobs, ForwardBackwardInput } from '../shared/backend/backend.js';
import { EngineBackend } from '../shared/backend/engine/engine-backend.js';
import { EngineProcess } from '../shared/backend/engine/engine-process.js';
import { torchEngineCommand, writeRandomModel } from '../shared/backend/engine/installed-engines.js';
import {
  discardBlob,
  exportCheckpoint,
  fetchBlob,
  importCheckpoint,
  planArchive,
  putArchive,
  putBlob,
  readStateBlob,
  writeStateBlob,
} from '../shared/services/worker/state-blobs.js';
import { type BenchResult, type Counts, machine, runCase } from './harness.js';
import { startCloudChild, stopCloudChild } from './support/cloud-child.js';

/**
 * `npm run bench -- state-size [--quick]`: a model state of more than 1 GB through the worker's blob
 * path (shared/services/worker/state-blobs.ts) on the torch engine and the local S3: trained, its
 * state saved and loaded into a second engine process, training resumed there, a training checkpoint
 * saved (with its C2 archive) and loaded. Ours: blobs as files (docs/engine-protocol.md#blobs-as-files),
 * uploaded in parts; baseline: the same engine answering bytes (as an engine without `blob_files`),
 * also uploaded in parts. Each side runs in its own Node process, so its peak RSS is its own; the
 * local cloud runs in another (bench/support/cloud-child.ts). Counts: each phase's milliseconds, the
 * state and checkpoint sizes, and the peak RSS (MiB) of the Node process and of each engine process.
 *
 * The full run uses a random Llama of hidden 1024 and 8 layers (100M parameters) at LoRA rank 512:
 * 80.6M trainable parameters, a 1.29 GB state; `--quick` hidden 512, 4 layers, rank 32 (a 20 MB state).
 */

const THIS_FILE = fileURLToPath(import.meta.url);
const SIDES = ['files', 'bytes'] as const;
type Side = (typeof SIDES)[number];

interface Shape {
  readonly hidden: number;
  readonly layers: number;
  readonly rank: number;
}

const FULL: Shape = { hidden: 1024, layers: 8, rank: 512 };
const QUICK: Shape = { hidden: 512, layers: 4, rank: 32 };

export async function run(options: { quick: boolean }): Promise<BenchResult> {
  const shape = options.quick ? QUICK : FULL;
  const folder = mkdtempSync(path.join(tmpdir(), 'state-size-'));
  const model = path.join(folder, 'model');
  const { endpoints, child } = await startCloudChild();
  try {
    await writeRandomModel(model, { hidden: shape.hidden, layers: shape.layers });
    await localAwsClients(endpoints).s3.send(new CreateBucketCommand({ Bucket: 'state-size' }));
    const side = (name: Side) => () => sideProcess(name, { endpoints, model, rank: shape.rank });
    const result = await runCase({
      name: `state_${shape.hidden}x${shape.layers}_rank${shape.rank}`,
      params: { hidden: shape.hidden, layers: shape.layers, rank: shape.rank },
      ours: side('files'),
      baselines: { bytes: side('bytes') },
      repeats: 1,
    });
    return { name: 'state-size', machine: machine(), quick: options.quick, cases: [result] };
  } finally {
    await stopCloudChild(child);
    rmSync(folder, { recursive: true, force: true });
  }
}

/** One side in a child Node process; answers its counts. */
function sideProcess(
  side: Side,
  args: { endpoints: CloudEndpoints; model: string; rank: number },
): Promise<Counts> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', THIS_FILE, '--state-size-side', JSON.stringify({ side, ...args })],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString('utf8');
    });
    child.on('exit', (code) => {
      const last = out.trim().split('\n').pop() ?? '';
      if (code !== 0) reject(new Error(`the ${side} side exited with code ${code}`));
      else resolve(JSON.parse(last) as Counts);
    });
  });
}

/** An engine answering bytes: the baseline, as an engine that does not list `blob_files`. */
class BytesOnlyEngine extends EngineBackend {
  override fileBlobs(): Promise<FileBlobs | undefined> {
    return Promise.resolve(undefined);
  }
}

/** VmHWM of a process, in MiB. */
function peakRssMiB(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN;
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = Number(/VmHWM:\s+(\d+)\s+kB/.exec(status)?.[1]);
  return Math.round(kib / 1024);
}

async function runSide(): Promise<void> {
  const raw = process.argv[process.argv.indexOf('--state-size-side') + 1] as string;
  const { side, endpoints, model, rank } = JSON.parse(raw) as {
    side: Side;
    endpoints: CloudEndpoints;
    model: string;
    rank: number;
  };
  const s3 = localAwsClients(endpoints).s3;
  const bucket = 'state-size';
  const transfer = { partBytes: 8 * 1024 * 1024, concurrency: 4 };
  const processes: EngineProcess[] = [];
  const engine = (): EngineBackend => {
    const process_ = new EngineProcess(
      torchEngineCommand({ baseModel: model, device: 'cpu', dtype: 'float32' }),
      {
        requestTimeoutMs: 30 * 60_000,
      },
    );
    processes.push(process_);
    return side === 'files' ? new EngineBackend(process_) : new BytesOnlyEngine(process_);
  };
  const input: ForwardBackwardInput = {
    loss_fn: 'cross_entropy',
    loss_fn_config: {},
    data: [
      {
        model_input: {
          chunks: [{ type: 'encoded_text', tokens: Int32Array.from([5, 6, 7, 8, 9, 10, 11, 12]) }],
        },
        loss_fn_inputs: {
          target_tokens: {
            dtype: 'int64',
            data: BigInt64Array.from([6n, 7n, 8n, 9n, 10n, 11n, 12n, 13n]),
            shape: [8],
          },
        },
      },
    ],
  };
  const step = async (backend: EngineBackend, state: BackendState): Promise<BackendState> => {
    const passed = await backend.forwardBackward(state, input);
    return (await backend.optimStep(passed.state, { learning_rate: 1e-4 })).state;
  };
  const counts: Record<string, number> = {};
  const timed = async <T>(name: string, work: () => Promise<T>): Promise<T> => {
    const started = performance.now();
    const value = await work();
    counts[`${name}_ms`] = Math.round(performance.now() - started);
    return value;
  };

  const first = engine();
  let state = await timed('create', () =>
    first.createModel({ base_model: model, lora_config: { rank, seed: 1 } }),
  );
  state = await timed('train', () => step(first, state));
  // With a gradient accumulated too: every part of a state (weights, both moments, gradient).
  state = (await first.forwardBackward(state, input)).state;
  const stored = await timed('save_state', () =>
    writeStateBlob(first, s3, bucket, `state/${side}.bin`, state, { keepBytesUpTo: 0, transfer }),
  );
  counts.state_bytes = stored.size;

  // Reloaded by another engine process, as a worker that does not hold the model (S4), then trained on.
  const second = engine();
  await second.start();
  const loaded = await timed('load_state', () => readStateBlob(second, s3, bucket, `state/${side}.bin`));
  const resumed = await timed('resume', () => step(second, loaded));

  const checkpoint = await timed('save_checkpoint', async () => {
    const blob = await timed('export_checkpoint', () => exportCheckpoint(first, state, 'training'));
    const plan = await planArchive(blob, Date.now());
    await timed('upload_checkpoint', () =>
      Promise.all([
        putBlob(s3, bucket, `checkpoints/${side}.tar`, blob, transfer),
        putArchive(s3, bucket, { key: `archives/${side}.tar`, plan }, blob, transfer),
      ]),
    );
    await discardBlob(blob);
    return { size: 'bytes' in blob ? blob.bytes.length : blob.file.size, archive: plan.size };
  });
  counts.checkpoint_bytes = checkpoint.size;
  counts.archive_bytes = checkpoint.archive;
  await timed('load_checkpoint', async () => {
    const blob = await fetchBlob(
      s3,
      bucket,
      `checkpoints/${side}.tar`,
      (await second.fileBlobs()) !== undefined,
    );
    try {
      await importCheckpoint(second, resumed, blob, { optimizer: true });
    } finally {
      await discardBlob(blob);
    }
  });

  counts.engine_save_peak_rss_mib = peakRssMiB(processes[0]?.pid);
  counts.engine_load_peak_rss_mib = peakRssMiB(processes[1]?.pid);
  counts.node_peak_rss_mib = Math.round(process.resourceUsage().maxRSS / 1024);
  await Promise.all(processes.map((p) => p.stop()));
  for (const key of [`state/${side}.bin`, `checkpoints/${side}.tar`, `archives/${side}.tar`]) {
    await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: key }));
  }
  process.stdout.write(`${JSON.stringify(counts)}\n`);
  process.exit(0);
}

// Last: the child mode needs every declaration above.
if (process.argv.includes('--state-size-side')) await runSide();
