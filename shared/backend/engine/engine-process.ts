import { type ChildProcess, spawn } from 'node:child_process';
import { ConfigError, InfrastructureError, StepUserError } from '../../base/errors.js';
import { logger } from '../../base/logger.js';
import {
  EngineProtocolError,
  encodeFrame,
  type Frame,
  FrameBuilder,
  FrameReader,
  resolveBuffers,
} from './frame.js';

/**
 * One engine process (docs/engine-protocol.md, G1): spawned from a command, greeted with `hello`,
 * then driven one request at a time (version 1 engines answer in order). The worker's calls queue
 * here; each request's timeout starts when it is written.
 *
 * Faults are infrastructure errors of the request in flight (E6: its work item is re-planned), never a
 * wrong answer: the engine exiting fails that request and the queued ones; a request unanswered
 * within its timeout kills the engine first. The next request starts a new process (a new `run`),
 * and handles issued by an earlier run are refused before they reach it (`call`'s `run`), since a new
 * engine may issue the same handle strings for other states.
 */

export const PROTOCOL_VERSION = 1;

export interface EngineCommand {
  readonly command: string;
  readonly args: readonly string[];
  /** Added to this process's environment. */
  readonly env?: Readonly<Record<string, string>>;
  readonly cwd?: string;
}

export interface EngineProcessOptions {
  /** How long an operation may take before the engine is deemed hung (default 10 minutes). */
  readonly requestTimeoutMs?: number;
  /** For `hello` (which loads the base model) and `ping` (default 5 minutes and 10 s). */
  readonly helloTimeoutMs?: number;
  readonly pingTimeoutMs?: number;
  /** Free text sent in `hello` (which worker drives the engine). */
  readonly worker?: string;
}

export interface EngineBaseModel {
  readonly name: string;
  readonly tokenizer_id: string;
  readonly vocab_size: number;
  /** Tokens a sequence may hold; BASE_MODELS names it so the API refuses longer ones at submit (B2). */
  readonly max_context_length?: number;
}

export interface EngineHello {
  readonly protocol_version: number;
  readonly engine: { readonly name: string; readonly version: string };
  readonly base_models: readonly EngineBaseModel[];
  readonly device: string;
  readonly dtype: string;
  /** Optional additions to version 1 the engine speaks (docs/engine-protocol.md#versioning); absent: none. */
  readonly features?: readonly string[];
}

/** An engine answered `ok: false` with kind `user`: bad input found at execution (E6). */
export function engineUserError(message: string, field: string | undefined): StepUserError {
  return new StepUserError(message, field === undefined ? {} : { context: { field } });
}

/** The engine speaks another protocol version: configuration, not a transient fault. */
export class EngineVersionError extends ConfigError {}

interface InFlight {
  readonly id: number;
  readonly op: string;
  readonly resolve: (frame: Frame) => void;
  readonly reject: (error: Error) => void;
}

const STDERR_TAIL_LINES = 20;

export class EngineProcess {
  readonly #command: EngineCommand;
  readonly #requestTimeoutMs: number;
  readonly #helloTimeoutMs: number;
  readonly #pingTimeoutMs: number;
  readonly #worker: string;
  #child: ChildProcess | undefined;
  #reader = new FrameReader();
  #inFlight: InFlight | undefined;
  #nextId = 1;
  #run = 0;
  #hello: EngineHello | undefined;
  /** The last `hello` answered, kept across restarts (the same command speaks the same features). */
  #lastHello: EngineHello | undefined;
  #queue: Promise<unknown> = Promise.resolve();
  #stderrTail: string[] = [];
  #stderrPartial = '';
  #restarts = 0;

  constructor(command: EngineCommand, options: EngineProcessOptions = {}) {
    this.#command = command;
    this.#requestTimeoutMs = options.requestTimeoutMs ?? 10 * 60_000;
    this.#helloTimeoutMs = options.helloTimeoutMs ?? 5 * 60_000;
    this.#pingTimeoutMs = options.pingTimeoutMs ?? 10_000;
    this.#worker = options.worker ?? 'tinker-serverless worker';
  }

  /** Which process answered: bumped on every (re)start. Handles are valid only within one run. */
  get run(): number {
    return this.#run;
  }

  /** Processes started after the first (crashes, hangs, protocol faults). */
  get restarts(): number {
    return this.#restarts;
  }

  /** The engine's process id while one runs (tests kill it to check crash handling). */
  get pid(): number | undefined {
    return this.#child?.pid;
  }

  /** The last `hello` an engine run answered (undefined before the first start). */
  get lastHello(): EngineHello | undefined {
    return this.#lastHello;
  }

  /** Starts the engine if none runs and answers its `hello`. */
  start(): Promise<EngineHello> {
    return this.#serial(() => this.#ensureStarted());
  }

  /** A health check: `ping` answered within the ping timeout, else the engine is restarted. */
  async ping(): Promise<void> {
    await this.call('ping', () => ({}), { timeoutMs: this.#pingTimeoutMs });
  }

  /**
   * One request. `build` writes the args (tensors and bytes through the builder); the answer's
   * `result` comes back with its buffers resolved. `run`, when given, is the run that issued the
   * handles the args name: a request for an earlier run fails without reaching the engine.
   */
  call(
    op: string,
    build: (frame: FrameBuilder) => Record<string, unknown>,
    options: { readonly run?: number; readonly timeoutMs?: number } = {},
  ): Promise<{ readonly result: Record<string, unknown>; readonly run: number }> {
    return this.#serial(async () => {
      await this.#ensureStarted();
      if (options.run !== undefined && options.run !== this.#run) {
        throw new InfrastructureError(
          `engine handle from run ${options.run} is gone: the engine restarted (now run ${this.#run})`,
        );
      }
      const frame = new FrameBuilder();
      const args = build(frame);
      const answer = await this.#request(
        op,
        args,
        frame.buffers,
        options.timeoutMs ?? this.#requestTimeoutMs,
      );
      return { result: answerResult(op, answer), run: this.#run };
    });
  }

  /** Asks the engine to exit (`shutdown`), then kills it if it has not within a few seconds. */
  async stop(): Promise<void> {
    await this.#serial(async () => {
      const child = this.#child;
      if (child === undefined) return;
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      await this.#request('shutdown', {}, [], 5_000).catch(() => undefined);
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    });
  }

  #serial<T>(task: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(task);
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async #ensureStarted(): Promise<EngineHello> {
    if (this.#child !== undefined && this.#hello !== undefined) return this.#hello;
    if (this.#run > 0) this.#restarts += 1;
    this.#spawn();
    const answer = await this.#request(
      'hello',
      { protocol_version: PROTOCOL_VERSION, worker: this.#worker },
      [],
      this.#helloTimeoutMs,
    ).catch((error: unknown) => {
      this.#kill();
      throw error;
    });
    if (answer.header.ok !== true) {
      this.#kill();
      const { kind, message } = errorOf(answer.header);
      if (kind === 'protocol') {
        throw new EngineVersionError(
          `engine ${this.#describe()} refused protocol version ${PROTOCOL_VERSION}: ${message}`,
        );
      }
      throw new InfrastructureError(`engine ${this.#describe()} failed to start: ${message}`);
    }
    const hello = answerResult('hello', answer) as unknown as EngineHello;
    if (hello.protocol_version !== PROTOCOL_VERSION) {
      this.#kill();
      throw new EngineVersionError(
        `engine ${this.#describe()} answered hello with protocol version ${String(hello.protocol_version)}; this worker speaks ${PROTOCOL_VERSION}`,
      );
    }
    this.#hello = hello;
    this.#lastHello = hello;
    logger.info('engine started', {
      engine: `${hello.engine?.name} ${hello.engine?.version}`,
      run: this.#run,
      device: hello.device,
      dtype: hello.dtype,
    });
    return hello;
  }

  #describe(): string {
    return [this.#command.command, ...this.#command.args].join(' ');
  }

  #spawn(): void {
    this.#run += 1;
    this.#reader = new FrameReader();
    this.#hello = undefined;
    this.#stderrTail = [];
    this.#stderrPartial = '';
    const child = spawn(this.#command.command, [...this.#command.args], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: { ...process.env, ...this.#command.env },
      ...(this.#command.cwd === undefined ? {} : { cwd: this.#command.cwd }),
    });
    this.#child = child;
    const run = this.#run;
    child.stdout?.on('data', (chunk: Buffer) => {
      if (this.#child !== child) return;
      try {
        for (const frame of this.#reader.push(chunk)) this.#onFrame(frame);
      } catch (error) {
        this.#fail(error instanceof Error ? error : new EngineProtocolError(String(error)));
        this.#kill();
      }
    });
    child.stderr?.on('data', (chunk: Buffer) => this.#onStderr(chunk.toString('utf8'), run));
    child.stdin?.on('error', () => undefined);
    child.on('error', (error) => {
      if (this.#child !== child) return;
      this.#child = undefined;
      this.#fail(
        new InfrastructureError(`engine ${this.#describe()} could not start: ${error.message}`, {
          cause: error,
        }),
      );
    });
    child.on('exit', (code, signal) => {
      if (this.#child !== child) return;
      this.#child = undefined;
      const tail =
        this.#stderrTail.length === 0 ? '' : `; its last log lines:\n${this.#stderrTail.join('\n')}`;
      this.#fail(
        new InfrastructureError(
          `engine exited (${signal === null ? `code ${code}` : `signal ${signal}`}) during ${this.#inFlight?.op ?? 'no request'}${tail}`,
        ),
      );
    });
  }

  #onStderr(text: string, run: number): void {
    const lines = (this.#stderrPartial + text).split('\n');
    this.#stderrPartial = lines.pop() ?? '';
    for (const line of lines) {
      if (line.trim() === '') continue;
      logger.info('engine log', { engine_run: run, line });
      this.#stderrTail.push(line);
      if (this.#stderrTail.length > STDERR_TAIL_LINES) this.#stderrTail.shift();
    }
  }

  #onFrame(frame: Frame): void {
    const pending = this.#inFlight;
    if (pending === undefined || frame.header.id !== pending.id) {
      throw new EngineProtocolError(
        `engine answered id ${String(frame.header.id)} while ${pending === undefined ? 'no request was in flight' : `request ${pending.id} (${pending.op}) was`}`,
      );
    }
    this.#inFlight = undefined;
    pending.resolve(frame);
  }

  #fail(error: Error): void {
    const pending = this.#inFlight;
    this.#inFlight = undefined;
    pending?.reject(error);
  }

  #kill(): void {
    const child = this.#child;
    this.#child = undefined;
    this.#hello = undefined;
    child?.kill('SIGKILL');
  }

  #request(
    op: string,
    args: Record<string, unknown>,
    buffers: readonly Uint8Array[],
    timeoutMs: number,
  ): Promise<Frame> {
    const child = this.#child;
    if (child?.stdin === undefined || child.stdin === null) {
      return Promise.reject(new InfrastructureError(`engine is not running (request ${op})`));
    }
    const id = this.#nextId;
    this.#nextId = (this.#nextId % 0xffff_ffff) + 1;
    return new Promise<Frame>((resolve, reject) => {
      const timer = setTimeout(() => {
        if (this.#inFlight?.id !== id) return;
        this.#fail(
          new InfrastructureError(
            `engine did not answer ${op} within ${timeoutMs} ms; it is killed and restarts on the next request`,
          ),
        );
        this.#kill();
      }, timeoutMs);
      const settle =
        <T>(done: (value: T) => void) =>
        (value: T) => {
          clearTimeout(timer);
          done(value);
        };
      this.#inFlight = { id, op, resolve: settle(resolve), reject: settle(reject) };
      for (const chunk of encodeFrame({ id, op, args }, buffers)) child.stdin?.write(chunk);
    });
  }
}

function errorOf(header: Readonly<Record<string, unknown>>): {
  kind: string;
  message: string;
  field?: string;
} {
  const error = header.error as { kind?: unknown; message?: unknown; field?: unknown } | undefined;
  return {
    kind: typeof error?.kind === 'string' ? error.kind : 'infrastructure',
    message: typeof error?.message === 'string' ? error.message : 'the engine gave no message',
    ...(typeof error?.field === 'string' ? { field: error.field } : {}),
  };
}

/** An answer's result with its buffers resolved, or its error as the project's error types. */
function answerResult(op: string, answer: Frame): Record<string, unknown> {
  const { header } = answer;
  if (header.ok === true) {
    const result = resolveBuffers(header.result ?? {}, answer.buffers);
    if (result === null || typeof result !== 'object' || Array.isArray(result)) {
      throw new EngineProtocolError(`engine answered ${op} with a result that is not an object`);
    }
    return result as Record<string, unknown>;
  }
  throw engineError(op, header.error);
}

/** An error object of an answer (or of one `run_passes` outcome) as the project's error types. */
export function engineError(op: string, raw: unknown): Error {
  const error = errorOf({ error: raw });
  if (error.kind === 'user') return engineUserError(error.message, error.field);
  if (error.kind === 'protocol') return new EngineProtocolError(`engine refused ${op}: ${error.message}`);
  return new InfrastructureError(`engine failed ${op}: ${error.message}`);
}
