import * as path from 'node:path';
import type { EngineBackend } from '../../shared/backend/engine/engine-backend.js';
import {
  type EngineName,
  engineName,
  resolveBaseModel,
} from '../../shared/backend/engine/installed-engines.js';
import {
  LOCAL_DIR,
  removeLocalEnvFile,
  runningWriter,
  writeLocalEnvFile,
} from '../../shared/base/env-file.js';
import { logger } from '../../shared/base/logger.js';
import { FUNCTION_IDS } from '../../shared/base/topology.js';
import type { Residency } from '../../shared/services/worker/residency.js';
import { engineStack, engineStackEnv } from './engine-stack.js';
import { printDevelopmentApiKey, readyHooks } from './on-ready.js';
import { DEFAULT_API_PORT, DEFAULT_STATUS_PORT, portNotice, portSetting } from './port-choice.js';
import { clientExportLines, type LocalStack, type LocalStackOptions, startLocalStack } from './stack.js';
import { type StatusPageServer, startStatusPage } from './status-page/server.js';
import { startWorkerProcesses, type WorkerProcesses } from './worker-processes.js';

/**
 * `npm start`: DynamoDB Local + fauxqs, the topology's resources under the prefix `local`, and every
 * handler behind its triggers. Prints the API base URL; Ctrl-C (or SIGTERM) stops everything.
 *
 * Data persists across restarts in `<local dir>/data` (the local dir is `.local/`, or
 * TINKER_LOCAL_DIR): tables, objects, queued messages and the development keys. `--throwaway` (or
 * TINKER_LOCAL_THROWAWAY=1) keeps everything in memory instead, as the tests and benches do.
 *
 * `--engine torch` runs the worker on the PyTorch + PEFT engine (shared/backend/engine/installed-engines.ts) instead of the
 * reference backend, serving one base model: `--base-model <hub id or folder>`, by default the tiny
 * model `npm run engine:install` writes. The pool's base models (BASE_MODELS) are then that model,
 * named by its absolute path when it is a folder, with itself as the tokenizer.
 *
 * `--workers N` runs N worker processes (`bin/worker.ts`, each with its own engine under `--engine`)
 * instead of the in-process worker handler (local/runtime/worker-processes.ts): each leases a work
 * lane and keeps its models resident, as GPU hosts do; a SIGTERM to one drains it, a SIGKILL is a
 * lost host. Ctrl-C drains them all before the local cloud stops.
 */
const PREFIX = 'local';

interface StartSettings {
  readonly envFile: string;
  /** Undefined for a throwaway stack. */
  readonly dataDir: string | undefined;
  /** Undefined: the reference backend. */
  readonly engine: { readonly name: EngineName; readonly baseModel: string | undefined } | undefined;
  /** Undefined: the worker handler runs in this process. */
  readonly workers: number | undefined;
}

const FLAGS = '--throwaway, --engine <name>, --base-model <id or path>, --workers <n>';

function startSettings(argv: readonly string[], env: NodeJS.ProcessEnv): StartSettings {
  let throwaway = env.TINKER_LOCAL_THROWAWAY === '1';
  let engine: string | undefined;
  let baseModel: string | undefined;
  let workers: number | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      const next = argv[++i];
      if (next === undefined) throw new Error(`${arg} needs a value`);
      return next;
    };
    if (arg === '--throwaway') throwaway = true;
    else if (arg === '--engine') engine = value();
    else if (arg === '--base-model') baseModel = value();
    else if (arg === '--workers') {
      const raw = value();
      workers = Number(raw);
      if (!Number.isInteger(workers) || workers < 1) {
        throw new Error(`--workers must be a positive integer, got "${raw}"`);
      }
    } else throw new Error(`unknown argument ${arg} (the flags are ${FLAGS})`);
  }
  if (baseModel !== undefined && engine === undefined) {
    throw new Error('--base-model needs --engine (the reference backend serves its own model)');
  }
  const localDir = path.resolve(env.TINKER_LOCAL_DIR ?? LOCAL_DIR);
  return {
    envFile: path.join(localDir, 'env.json'),
    dataDir: throwaway ? undefined : path.join(localDir, 'data'),
    engine: engine === undefined ? undefined : { name: engineName(engine), baseModel },
    workers,
  };
}

let envFile: string | undefined;

let stack: LocalStack | undefined;
let engineBackend: EngineBackend | undefined;
let residency: Residency | undefined;
let statusPage: StatusPageServer | undefined;
let workerProcesses: WorkerProcesses | undefined;
let stopping = false;

async function shutdown(exitCode: number): Promise<never> {
  if (stopping) process.exit(exitCode);
  stopping = true;
  try {
    if (envFile !== undefined) removeLocalEnvFile(envFile);
    await statusPage?.stop();
    // Worker processes drain and let go of their models while the local cloud still runs (S3).
    await workerProcesses?.stop();
    // Resident models are snapshotted and let go while the local cloud still runs (S3).
    await residency?.letGoAll();
  } finally {
    await stack?.stop();
    await engineBackend?.stop();
  }
  process.exit(exitCode);
}

function onSignal(signal: NodeJS.Signals): void {
  // A second Ctrl-C exits at once; the JVM's watchdog still stops DynamoDB Local.
  if (stopping) process.exit(130);
  process.stdout.write(`\n${signal}: stopping the local stack...\n`);
  void shutdown(0);
}

async function main(): Promise<void> {
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const started = performance.now();
  const settings = startSettings(process.argv.slice(2), process.env);
  const { dataDir } = settings;
  // Two stacks on one data directory would corrupt it (one DynamoDB Local file, one message store).
  const other = dataDir === undefined ? undefined : runningWriter(settings.envFile);
  if (other !== undefined) {
    throw new Error(
      `another 'npm start' (pid ${other}) is using ${path.dirname(settings.envFile)}; stop it, or start this one with --throwaway`,
    );
  }
  envFile = settings.envFile;
  // Fixed ports when free, so exported URLs survive a restart (local/runtime/port-choice.ts).
  const apiPort = portSetting('PORT', process.env.PORT, DEFAULT_API_PORT);
  const statusPort = portSetting('STATUS_PORT', process.env.STATUS_PORT, DEFAULT_STATUS_PORT);
  let engineLines: string[] = [];
  let engineOptions: Pick<LocalStackOptions, 'extraEnv' | 'runtime'> = {};
  let workerEngine: { name: EngineName; baseModel: string } | undefined;
  if (settings.workers !== undefined) {
    // The worker processes consume the work queue; the handler does not run here.
    engineOptions = { runtime: { functions: FUNCTION_IDS.filter((id) => id !== 'worker') } };
    if (settings.engine !== undefined) {
      const baseModel = resolveBaseModel(settings.engine.baseModel);
      workerEngine = { name: settings.engine.name, baseModel };
      engineOptions = { ...engineOptions, extraEnv: engineStackEnv(baseModel) };
      engineLines = [
        `Workers: the ${settings.engine.name} engine; base model (base_model in requests):`,
        baseModel,
      ];
    }
  } else if (settings.engine !== undefined) {
    const baseModel = resolveBaseModel(settings.engine.baseModel);
    process.stdout.write(`starting the ${settings.engine.name} engine on ${baseModel}...\n`);
    const started = await engineStack(settings.engine.name, baseModel, 'npm start');
    engineBackend = started.backend;
    residency = started.residency;
    engineOptions = started.options;
    engineLines = [
      `Worker: the ${settings.engine.name} engine; base model (base_model in requests):`,
      baseModel,
    ];
  }
  stack = await startLocalStack({
    prefix: PREFIX,
    httpPort: apiPort,
    ...(dataDir === undefined ? {} : { dataDir }),
    ...engineOptions,
  });
  const { apiUrl, env, resources, clients } = stack;
  // The operator's view (own port) and the env file the CLI (`npx tinker-serverless status`) reads.
  statusPage = await startStatusPage({ port: statusPort });
  const portNotices = [
    portNotice('API', 'PORT', apiPort, Number(new URL(apiUrl).port)),
    portNotice('status page', 'STATUS_PORT', statusPort, Number(new URL(statusPage.url).port)),
  ].filter((line) => line !== undefined);
  writeLocalEnvFile({ ...env, TINKER_BASE_URL: apiUrl, TINKER_STATUS_URL: statusPage.url }, envFile);
  if (settings.workers !== undefined) {
    workerProcesses = startWorkerProcesses({
      count: settings.workers,
      envFile,
      ...(workerEngine === undefined ? {} : { engine: workerEngine }),
      print: (line) => process.stdout.write(`${line}\n`),
    });
    engineLines.push(
      `Worker processes (bin/worker.ts), pids: ${workerProcesses.workers.map((worker) => worker.pid).join(' ')}`,
    );
  }
  if (dataDir !== undefined) {
    // Streams start at their tip, so work restored from an earlier run waits for no new write: run
    // the sweeper's schedule (lease re-plans, then a safety tick) once now instead of in a minute.
    stack.runtime
      .runSchedule('sweeper')
      .catch((error: unknown) => logger.error('start-up sweep failed', { error: error as Error }));
  }
  const extraLines: string[] = [...engineLines, 'Queue status page:', statusPage.url];
  extraLines.push(
    dataDir === undefined
      ? 'Data: in memory only (--throwaway); gone when this stops.'
      : `Data kept across restarts in ${dataDir} (wipe: stop, then delete that folder; in memory instead: npm start -- --throwaway).`,
  );
  let developmentKey: string | undefined;
  for (const hook of readyHooks) {
    const lines = await hook({
      apiUrl,
      env,
      resources,
      clients,
      ...(dataDir === undefined ? {} : { dataDir }),
    });
    extraLines.push(...lines);
    // That hook's last line is the key itself (see local/runtime/on-ready.ts).
    if (hook === printDevelopmentApiKey) developmentKey = lines.at(-1);
  }
  if (developmentKey !== undefined) {
    extraLines.push('Point any Tinker client at it:', ...clientExportLines(apiUrl, developmentKey));
  }
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  process.stdout.write(
    [
      `tinker-serverless is running locally (DynamoDB Local + fauxqs + handlers), up in ${seconds} s.`,
      'API base URL:',
      apiUrl,
      ...portNotices,
      ...extraLines,
      'Press Ctrl-C to stop.',
      '',
    ].join('\n'),
  );
}

main().catch(async (error: unknown) => {
  // One line for the developer (e.g. "needs Java 17+"); the stack only when asked for.
  process.stderr.write(`npm start failed: ${error instanceof Error ? error.message : String(error)}\n`);
  if (process.env.DEBUG !== undefined && error instanceof Error) process.stderr.write(`${error.stack}\n`);
  await shutdown(1);
});
