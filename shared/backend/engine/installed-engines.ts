import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import type { BaseModelConfig } from '../../base/config.js';
import { LOCAL_DIR, PROJECT_ROOT } from '../../base/env-file.js';
import { EngineBackend } from './engine-backend.js';
import { type EngineCommand, EngineProcess } from './engine-process.js';

/**
 * The engines `npm start -- --engine <name>` and `npm run worker -- --engine <name>` run (G1): today
 * `torch`, the PyTorch + PEFT engine of engines/torch/, installed by `npm run engine:install` into
 * `.local/engine-venv` (with the tiny local model in `.local/models/tiny-llama`). Any other engine
 * plugs in through `--backend <module>` with a module whose `createBackend()` returns an
 * `EngineBackend` over its own command (docs/architecture.md#writing-another-engine).
 */

export const ENGINE_NAMES = ['torch'] as const;
export type EngineName = (typeof ENGINE_NAMES)[number];

/**
 * Where `npm run engine:install` puts the torch engine's environment and the tiny model: under the
 * checkout's `.local/`, found the same from the sources and from the compiled `dist/` entry points.
 */
export const TORCH_ENGINE_VENV = path.join(LOCAL_DIR, 'engine-venv');
export const TINY_MODEL_DIR = path.join(LOCAL_DIR, 'models', 'tiny-llama');

const INSTALL_HINT = 'install it with `npm run engine:install` (a private venv in .local/engine-venv)';

export function engineName(raw: string): EngineName {
  if ((ENGINE_NAMES as readonly string[]).includes(raw)) return raw as EngineName;
  throw new Error(`--engine ${raw}: the engines are ${ENGINE_NAMES.join(', ')}`);
}

/** The Python of the torch engine's environment; a clear error when it is not installed. */
export function torchEnginePython(venv: string = TORCH_ENGINE_VENV): string {
  const python = path.join(venv, 'bin', 'python');
  if (!existsSync(python))
    throw new Error(`the torch engine is not installed (no ${python}): ${INSTALL_HINT}`);
  return python;
}

/**
 * A base model named as every tool names it: a folder by its absolute path (capabilities, get_info,
 * and `base_model_name_or_path` of exported adapters), anything else as given (a Hub id). Undefined:
 * the tiny local model, which must have been written by the install.
 */
export function resolveBaseModel(raw: string | undefined): string {
  if (raw === undefined) {
    if (!existsSync(path.join(TINY_MODEL_DIR, 'config.json'))) {
      throw new Error(`the tiny local model is missing (${TINY_MODEL_DIR}): ${INSTALL_HINT}`);
    }
    return TINY_MODEL_DIR;
  }
  const local = path.resolve(raw);
  return existsSync(local) ? local : raw;
}

/**
 * The pool's base model list for one engine model: its tokenizer is the model's own, and a folder's
 * `max_position_embeddings` (config.json) is the context `get_server_capabilities` advertises.
 */
export function engineBaseModels(baseModel: string): BaseModelConfig[] {
  const configFile = path.join(baseModel, 'config.json');
  let context: number | undefined;
  if (existsSync(configFile)) {
    const positions = (JSON.parse(readFileSync(configFile, 'utf8')) as { max_position_embeddings?: unknown })
      .max_position_embeddings;
    if (Number.isSafeInteger(positions) && (positions as number) > 0) context = positions as number;
  }
  return [
    {
      name: baseModel,
      tokenizer_id: baseModel,
      ...(context === undefined ? {} : { max_context_length: context }),
    },
  ];
}

export interface EngineStartOptions {
  readonly baseModel: string;
  /** `cpu`, `cuda`, ... (the engine's default: cuda when available). */
  readonly device?: string;
  readonly dtype?: string;
  /** Free text for the engine's hello. */
  readonly worker?: string;
}

/** The torch engine's sources in this checkout. */
export const TORCH_ENGINE_SOURCES = path.join(PROJECT_ROOT, 'engines', 'torch');

export function torchEngineCommand(options: EngineStartOptions): EngineCommand {
  // This checkout's engine sources come first on the path: the venv's editable install names the
  // checkout that installed it, which a second worktree sharing the venv is not.
  const inherited = process.env.PYTHONPATH;
  return {
    command: torchEnginePython(),
    env: {
      PYTHONPATH: inherited ? `${TORCH_ENGINE_SOURCES}${path.delimiter}${inherited}` : TORCH_ENGINE_SOURCES,
    },
    args: [
      '-m',
      'tinker_engine',
      '--base-model',
      options.baseModel,
      ...(options.device === undefined ? [] : ['--device', options.device]),
      ...(options.dtype === undefined ? [] : ['--dtype', options.dtype]),
    ],
  };
}

/**
 * The engine started and greeted: a protocol mismatch, a missing environment or a base model the
 * engine does not load fails here, before any work item is taken.
 */
export async function startEngineBackend(
  name: EngineName,
  options: EngineStartOptions,
): Promise<EngineBackend> {
  const command = torchEngineCommand(options);
  const backend = new EngineBackend(
    new EngineProcess(command, options.worker === undefined ? {} : { worker: options.worker }),
    { name },
  );
  const hello = await backend.start();
  const served = hello.base_models.map((model) => model.name);
  if (!served.includes(options.baseModel)) {
    await backend.stop();
    throw new Error(`the ${name} engine loaded ${served.join(', ')}, not ${options.baseModel}`);
  }
  return backend;
}

/** The size of a random Llama the engine's tool writes (`python -m tinker_engine.tiny_model`). */
export interface RandomModelSize {
  readonly hidden: number;
  readonly layers: number;
  readonly heads?: number;
  readonly intermediate?: number;
  readonly seed?: number;
}

/**
 * Writes a random Llama of `size` into `dir` with the engine's own tool (the tiny model's byte-level
 * tokenizer; the same bytes for the same size and seed), unless `dir` already holds one: for tests and
 * benchmarks of models of real size, which no test downloads.
 */
export async function writeRandomModel(dir: string, size: RandomModelSize): Promise<string> {
  if (existsSync(path.join(dir, 'config.json'))) return dir;
  const args = [
    '-m',
    'tinker_engine.tiny_model',
    dir,
    '--hidden',
    `${size.hidden}`,
    '--layers',
    `${size.layers}`,
  ];
  if (size.heads !== undefined) args.push('--heads', `${size.heads}`);
  if (size.intermediate !== undefined) args.push('--intermediate', `${size.intermediate}`);
  if (size.seed !== undefined) args.push('--seed', `${size.seed}`);
  await promisify(execFile)(torchEnginePython(), args, { cwd: TORCH_ENGINE_SOURCES });
  return dir;
}
