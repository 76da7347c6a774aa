import { phraseDatum } from '../../local/demos/parts/dataset.js';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import { DEFAULT_BASE_MODEL } from '../../shared/services/api/capabilities.js';
import { classifyFailure, type Endpoint, type LoadRecorder, THROTTLE_STATUSES } from './recorder.js';

/**
 * One simulated Tinker user, in a closed loop: a session and a LoRA model, then rounds of
 * forward_backward + optim_step (submitted back to back, then both awaited, as the cookbook's loop
 * does); every `checkpointEvery` rounds a sampler checkpoint, a sampling session on it and a sample
 * from it. Every future is awaited through retrieve_future long polls until it is terminal.
 * Throttles (408/429/503) are retried with backoff and counted; any other failure is counted as an
 * error and ends this client (the run reports it).
 */

export interface SharedRun {
  readonly recorder: LoadRecorder;
  /** Takes `n` requests from the run's cap; false once the cap would be passed. */
  readonly reserve: (n: number) => boolean;
  /** No new round starts after this (epoch ms); rounds under way finish. */
  readonly stopAt: number;
  /** Waits give up here (epoch ms): a future still pending then is a stuck one. */
  readonly hardStopAt: number;
  readonly checkpointEvery: number;
  /** Rounds that start even after `stopAt`. */
  readonly minRounds: number;
  /** Aborted at the hard deadline (plus a second) or when the run is interrupted; aborts open calls. */
  readonly signal: AbortSignal;
}

const TEXTS = [
  'the cat sat on the mat.',
  'a bird sang in the tree.',
  'la na la na la.',
  'it rains, it pours.',
];
const ADAM = { learning_rate: 0.02 } as const;
const SAMPLE_TOKENS = 8;
const MAX_SUBMIT_THROTTLES = 8;
const ROUND_REQUESTS = 2;
const CHECKPOINT_REQUESTS = 3;

/** Ends a client's loop; what caused it is already recorded. */
class ClientStopped extends Error {}

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const backoffMs = (attempt: number) => Math.min(1_000, 50 * 2 ** attempt) * (0.5 + Math.random() / 2);

interface Submitted<T> {
  readonly value: T;
  /** performance.now() at the first attempt. */
  readonly since: number;
}

export class LoadClient {
  constructor(
    private readonly client: TinkerClient,
    private readonly index: number,
    private readonly run: SharedRun,
  ) {}

  /** Runs until the time or the request cap is up; false when an error or a stuck future ended it early. */
  async start(): Promise<boolean> {
    try {
      await this.#loop();
      return true;
    } catch (error) {
      if (error instanceof ClientStopped) return false;
      throw error;
    }
  }

  async #loop(): Promise<void> {
    const client = this.client;
    if (!this.run.reserve(2)) return;
    const { session_id } = (
      await this.#submit('create_session', false, () => client.createSession({ tags: ['load'] }))
    ).value;
    const created = await this.#submit('create_model', true, () =>
      client.createModel({
        session_id,
        model_seq_id: 0,
        base_model: DEFAULT_BASE_MODEL,
        lora_config: { rank: 8, seed: this.index },
      }),
    );
    const modelId = created.value.model_id;
    await this.#wait('create_model', created.value.request_id, created.since);

    let seqId = 0;
    let samplingSeqId = 0;
    for (let round = 1; !this.run.signal.aborted; round++) {
      if (round > this.run.minRounds && Date.now() >= this.run.stopAt) return;
      const checkpoint = round % this.run.checkpointEvery === 0;
      if (!this.run.reserve(ROUND_REQUESTS + (checkpoint ? CHECKPOINT_REQUESTS : 0))) return;
      const data = [0, 1].map((i) => phraseDatum(TEXTS[(this.index + round + i) % TEXTS.length] as string));
      const pass = await this.#submit('forward_backward', true, () =>
        client.forwardBackward({
          model_id: modelId,
          seq_id: ++seqId,
          forward_backward_input: { data, loss_fn: 'cross_entropy' },
        }),
      );
      const step = await this.#submit('optim_step', true, () =>
        client.optimStep({ model_id: modelId, seq_id: ++seqId, adam_params: ADAM }),
      );
      await this.#all([
        this.#wait('forward_backward', pass.value.request_id, pass.since),
        this.#wait('optim_step', step.value.request_id, step.since),
      ]);
      if (!checkpoint) continue;

      const save = await this.#submit('save_weights_for_sampler', true, () =>
        client.saveWeightsForSampler({ model_id: modelId, seq_id: ++seqId, path: `round-${round}` }),
      );
      const { path } = await this.#wait<{ path: string }>(
        'save_weights_for_sampler',
        save.value.request_id,
        save.since,
      );
      const sampling = await this.#submit('create_sampling_session', false, () =>
        client.createSamplingSession({
          session_id,
          sampling_session_seq_id: samplingSeqId++,
          model_path: path,
        }),
      );
      const sample = await this.#submit('asample', true, () =>
        client.asample({
          sampling_session_id: sampling.value.sampling_session_id,
          seq_id: 0,
          num_samples: 1,
          prompt: { chunks: [{ type: 'encoded_text', tokens: [...Buffer.from('the ', 'utf8')] }] },
          sampling_params: { max_tokens: SAMPLE_TOKENS, temperature: 1, seed: this.index * 1000 + round },
        }),
      );
      await this.#wait('asample', sample.value.request_id, sample.since);
    }
  }

  #pastDeadline(): boolean {
    return Date.now() >= this.run.hardStopAt || this.run.signal.aborted;
  }

  /** Awaits every wait (so none polls on unobserved), then fails if any did. */
  async #all(waits: readonly Promise<unknown>[]): Promise<void> {
    const settled = await Promise.allSettled(waits);
    const failed = settled.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
  }

  async #submit<T>(endpoint: Endpoint, isFuture: boolean, call: () => Promise<T>): Promise<Submitted<T>> {
    const since = performance.now();
    for (let attempt = 0; ; attempt++) {
      const started = performance.now();
      try {
        const value = await call();
        this.run.recorder.submitted(endpoint, performance.now() - started, isFuture);
        return { value, since };
      } catch (error) {
        const failure = classifyFailure(endpoint, error);
        if (failure.kind === 'throttle' && attempt < MAX_SUBMIT_THROTTLES && !this.#pastDeadline()) {
          this.run.recorder.throttled(failure.key);
          await pause(backoffMs(attempt));
          continue;
        }
        this.run.recorder.error(failure.kind === 'throttle' ? `${failure.key}_exhausted` : failure.key);
        throw new ClientStopped();
      }
    }
  }

  /** Long-polls retrieve_future until the future is terminal; its result when it completed. */
  async #wait<T = unknown>(endpoint: Endpoint, requestId: string, since: number): Promise<T> {
    const recorder = this.run.recorder;
    for (let attempt = 0; ; ) {
      if (this.#pastDeadline()) {
        recorder.notTerminal(endpoint);
        throw new ClientStopped();
      }
      let answer: Awaited<ReturnType<TinkerClient['raw']>>;
      try {
        answer = await this.client.raw('POST', '/api/v1/retrieve_future', { request_id: requestId });
      } catch (error) {
        // The run aborts open polls at its hard deadline.
        if (this.#pastDeadline()) continue;
        recorder.error(classifyFailure('retrieve_future', error).key);
        throw new ClientStopped();
      }
      if (answer.status !== 200) {
        const key = `retrieve_future:${answer.status}`;
        if (THROTTLE_STATUSES.has(answer.status)) {
          recorder.throttled(key);
          await pause(backoffMs(attempt++));
          continue;
        }
        recorder.error(key);
        throw new ClientStopped();
      }
      const body = answer.body as Record<string, unknown> | null;
      const pending = body?.type === 'try_again';
      recorder.retrieved(pending);
      if (pending) continue;
      if (body && typeof body.error === 'string') {
        recorder.terminal(endpoint, 'failed', performance.now() - since, String(body.category));
        throw new ClientStopped();
      }
      recorder.terminal(endpoint, 'completed', performance.now() - since);
      return answer.body as T;
    }
  }
}
