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
 * One engine process (docs/engine-protocol.md, G1): spawned from a command, greeted with `hello`
 * (version 2 offered first, then 1). A version 1 engine is driven one request at a time, the worker's
 * calls queued here; a version 2 engine takes every call as it comes (several in flight, answered by
 * id), so concurrent `sample` calls share its decode steps (B1). Each request's timeout starts when it
 * is written; a version 2 `sample` has none (it may wait for KV room, and `stop_sample` ends it).
 * Instead, while one is in flight, an engine silent for `livenessProbeMs` is sent a `ping` with the
 * request timeout: a version 2 engine answers it at its next step boundary, so one that does not has
 * hung, and is killed like any engine that misses a timeout (its sample calls fail and are re-planned).
 *
 * Faults are infrastructure errors of the request in flight (E6: its work item is re-planned), never a
 * wrong answer: the engine exiting fails that request and the queued ones; a request unanswered
 * within its timeout kills the engine first. The next request starts a new process (a new `run`),
 * and handles issued by an earlier run are refused before they reach it (`call`'s `run`), since a new
 * engine may issue the same handle strings for other states.
 */

export const PROTOCOL_VERSION = 1;
/** The versions this worker speaks, the preferred first. */
export const PROTOCOL_VERSIONS = [2, 1] as const;

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
  /** The protocol versions to offer, preferred first (default `PROTOCOL_VERSIONS`). */
  readonly protocolVersions?: readonly number[];
  /**
   * While a request without a timeout (a version 2 `sample`) is in flight, the silence after which
   * the engine is pinged, with the request timeout (default 30 s).
   */
  readonly livenessProbeMs?: number;
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
  /** Written without a timeout: the liveness probe watches the engine while one is in flight. */
  readonly untimed: boolean;
  readonly resolve: (frame: Frame) => void;
  readonly reject: (error: Error) => void;
}

const STDERR_TAIL_LINES = 20;

export class EngineProcess {
  readonly #command: EngineCommand;
  readonly #requestTimeoutMs: number;
  readonly #helloTimeoutMs: number;
  readonly #pingTimeoutMs: number;
  readonly #livenessProbeMs: number;
  readonly #worker: string;
  readonly #versions: readonly number[];
  #child: ChildProcess | undefined;
  #reader = new FrameReader();
  readonly #inFlight = new Map<number, InFlight>();
  #nextId = 1;
  #run = 0;
  #hello: EngineHello | undefined;
  /** The last `hello` answered, kept across restarts (the same command speaks the same features). */
  #lastHello: EngineHello | undefined;
  #queue: Promise<unknown> = Promise.resolve();
  #stderrTail: string[] = [];
  #stderrPartial = '';
  #restarts = 0;
  /** When the engine last answered, or an untimed request started being watched (performance.now()). */
  #heardAt = 0;
  #probe: ReturnType<typeof setTimeout> | undefined;
  #probing = false;

  constructor(command: EngineCommand, options: EngineProcessOptions = {}) {
    this.#command = command;
    this.#requestTimeoutMs = options.requestTimeoutMs ?? 10 * 60_000;
    this.#helloTimeoutMs = options.helloTimeoutMs ?? 5 * 60_000;
    this.#pingTimeoutMs = options.pingTimeoutMs ?? 10_000;
    this.#livenessProbeMs = options.livenessProbeMs ?? 30_000;
    this.#worker = options.worker ?? 'tinker-serverless worker';
    this.#versions = options.protocolVersions ?? PROTOCOL_VERSIONS;
  }

  /** Which process answered: bumped on every (re)start. Handles are valid only within one run. */
  get run(): number {
    return this.#run;
  }

  /** The protocol version the running engine agreed to at `hello` (undefined before it has). */
  get protocolVersion(): number | undefined {
    return this.#hello?.protocol_version;
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
    return this.#dispatch(op, build, options.timeoutMs ?? this.#requestTimeoutMs, options.run);
  }

  /**
   * A `sample` request that `stop` can end early: on a version 2 engine an abort sends `stop_sample`,
   * and the call answers at the engine's next decode step with its sequences so far (`finished`
   * false). A version 1 engine ignores `stop` (its calls are slices that end on their own).
   */
  stoppableCall(
    op: string,
    build: (frame: FrameBuilder) => Record<string, unknown>,
    options: { readonly run?: number; readonly stop?: AbortSignal } = {},
  ): Promise<{ readonly result: Record<string, unknown>; readonly run: number }> {
    const stop = options.stop;
    const onWritten =
      stop === undefined
        ? undefined
        : (id: number, run: number) => {
            const send = () => {
              if (run !== this.#run || !this.#inFlight.has(id)) return;
              void this.#request('stop_sample', { call: id }, [], this.#requestTimeoutMs, undefined).catch(
                () => undefined,
              );
            };
            if (stop.aborted) send();
            else stop.addEventListener('abort', send, { once: true });
          };
    return this.#dispatch(op, build, null, options.run, onWritten);
  }

  #dispatch(
    op: string,
    build: (frame: FrameBuilder) => Record<string, unknown>,
    timeoutMs: number | null,
    run: number | undefined,
    onWritten?: (id: number, run: number) => void,
  ): Promise<{ readonly result: Record<string, unknown>; readonly run: number }> {
    const send = async () => {
      if (run !== undefined && run !== this.#run) {
        throw new InfrastructureError(
          `engine handle from run ${run} is gone: the engine restarted (now run ${this.#run})`,
        );
      }
      const frame = new FrameBuilder();
      const args = build(frame);
      const answered = this.#run;
      const answer = await this.#request(
        op,
        args,
        frame.buffers,
        timeoutMs ?? (this.protocolVersion === 1 ? this.#requestTimeoutMs : null),
        onWritten === undefined ? undefined : (id) => onWritten(id, answered),
      );
      return { result: answerResult(op, answer), run: answered };
    };
    // Version 2 takes requests as they come; only the start (and a restart) is serialized.
    if (this.#hello !== undefined && this.#hello.protocol_version >= 2 && this.#child !== undefined) {
      return send();
    }
    return this.#serial(async () => {
      await this.#ensureStarted();
      if (this.protocolVersion === 1) return send();
      return undefined;
    }).then((sent) => sent ?? send());
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
    let answer: Frame | undefined;
    let offered: number = PROTOCOL_VERSION;
    // The newest version first; a `protocol` refusal (the versions it speaks) tries the next.
    for (const version of this.#versions) {
      offered = version;
      answer = await this.#request(
        'hello',
        { protocol_version: version, worker: this.#worker },
        [],
        this.#helloTimeoutMs,
      ).catch((error: unknown) => {
        this.#kill();
        throw error;
      });
      if (answer.header.ok === true || errorOf(answer.header).kind !== 'protocol') break;
    }
    if (answer === undefined || answer.header.ok !== true) {
      this.#kill();
      const { kind, message } = errorOf(answer?.header ?? {});
      if (kind === 'protocol') {
        throw new EngineVersionError(
          `engine ${this.#describe()} refused protocol version ${offered}: ${message}`,
        );
      }
      throw new InfrastructureError(`engine ${this.#describe()} failed to start: ${message}`);
    }
    const hello = answerResult('hello', answer) as unknown as EngineHello;
    if (hello.protocol_version !== offered) {
      this.#kill();
      throw new EngineVersionError(
        `engine ${this.#describe()} answered hello with protocol version ${String(hello.protocol_version)}; this worker offered ${offered}`,
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
          `engine exited (${signal === null ? `code ${code}` : `signal ${signal}`}) during ${this.#describeInFlight()}${tail}`,
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

  #describeInFlight(): string {
    const ops = [...this.#inFlight.values()].map((request) => request.op);
    return ops.length === 0 ? 'no request' : ops.join(', ');
  }

  #onFrame(frame: Frame): void {
    const id = frame.header.id;
    const pending = typeof id === 'number' ? this.#inFlight.get(id) : undefined;
    if (pending === undefined) {
      const waiting = [...this.#inFlight.values()].map((request) => `${request.id} (${request.op})`);
      throw new EngineProtocolError(
        `engine answered id ${String(id)} while ${waiting.length === 0 ? 'no request was in flight' : `requests ${waiting.join(', ')} were`}`,
      );
    }
    this.#inFlight.delete(pending.id);
    this.#heardAt = performance.now();
    pending.resolve(frame);
  }

  /** Watches an engine holding untimed requests: pinged after `livenessProbeMs` of silence. */
  #watch(): void {
    if (this.#probe !== undefined) return;
    // Silence counts from when there is something to wait for.
    this.#heardAt = performance.now();
    this.#armProbe(this.#livenessProbeMs);
  }

  #armProbe(delayMs: number): void {
    this.#probe = setTimeout(() => this.#checkLiveness(), delayMs);
    this.#probe.unref();
  }

  #checkLiveness(): void {
    this.#probe = undefined;
    if (![...this.#inFlight.values()].some((request) => request.untimed)) return;
    const silentMs = performance.now() - this.#heardAt;
    if (silentMs < this.#livenessProbeMs) {
      this.#armProbe(this.#livenessProbeMs - silentMs);
      return;
    }
    if (!this.#probing) {
      this.#probing = true;
      // A miss kills the engine and fails every request in flight (#request's timeout).
      void this.#request('ping', {}, [], this.#requestTimeoutMs)
        .catch(() => undefined)
        .finally(() => {
          this.#probing = false;
        });
    }
    this.#armProbe(this.#livenessProbeMs);
  }

  /** Fails every request in flight (the process is gone or out of step). */
  #fail(error: Error): void {
    const pending = [...this.#inFlight.values()];
    this.#inFlight.clear();
    for (const request of pending) request.reject(error);
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
    timeoutMs: number | null,
    onWritten?: (id: number) => void,
  ): Promise<Frame> {
    const child = this.#child;
    if (child?.stdin === undefined || child.stdin === null) {
      return Promise.reject(new InfrastructureError(`engine is not running (request ${op})`));
    }
    const id = this.#nextId;
    this.#nextId = (this.#nextId % 0xffff_ffff) + 1;
    return new Promise<Frame>((resolve, reject) => {
      const timer =
        timeoutMs === null
          ? undefined
          : setTimeout(() => {
              if (!this.#inFlight.has(id)) return;
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
      this.#inFlight.set(id, {
        id,
        op,
        untimed: timeoutMs === null,
        resolve: settle(resolve),
        reject: settle(reject),
      });
      if (timeoutMs === null) this.#watch();
      for (const chunk of encodeFrame({ id, op, args }, buffers)) child.stdin?.write(chunk);
      onWritten?.(id);
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
