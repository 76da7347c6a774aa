import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { awsClients } from '../../shared/aws/clients.js';
import { logger } from '../../shared/base/logger.js';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import { type ApiHarness, startApiHarness } from '../support/api-harness.js';
import { createFaultInjector, type FaultInjector } from '../support/faults.js';

/**
 * Logs never contain payloads or keys. Everything the process writes (the Powertools logger writes
 * to stdout/stderr through its own Console; `console` is captured too) is collected while submits
 * carrying distinctive tokens, strings and a known API key run, valid and invalid, with faults
 * injected into the API's clients so the error paths log as well. None of those values may appear.
 */

const CANARY = 'canary-5e1f0b7d';
/** A token id no timestamp, id or count in a log line would contain by chance. */
const TOKEN = 1_987_654_321;
const WRONG_KEY = `tml-${CANARY}-${'q'.repeat(24)}`;

let api: ApiHarness;
let client: TinkerClient;
let apiKey = '';
let faults: FaultInjector;
let detach: () => void = () => {};
const captured: string[] = [];

function startCapture(): () => void {
  const keep = (chunk: unknown) => {
    captured.push(typeof chunk === 'string' ? chunk : Buffer.from(chunk as Uint8Array).toString('utf8'));
    return true;
  };
  const spies = [
    vi.spyOn(process.stdout, 'write').mockImplementation(keep),
    vi.spyOn(process.stderr, 'write').mockImplementation(keep),
    ...(['log', 'info', 'warn', 'error', 'debug'] as const).map((method) =>
      vi.spyOn(console, method).mockImplementation((...args: unknown[]) => {
        keep(args.map(String).join(' '));
      }),
    ),
  ];
  return () => {
    for (const spy of spies) spy.mockRestore();
  };
}

beforeAll(async () => {
  // DEBUG: every log statement on these paths runs.
  api = await startApiHarness({ POWERTOOLS_LOG_LEVEL: 'DEBUG', MAX_BODY_BYTES: String(64 * 1024) });
  ({ client, key: apiKey } = await api.tenant('logs'));
});

afterAll(async () => {
  detach();
  await api?.stop();
});

const datum = (tokens: number[]) => ({
  model_input: { chunks: [{ type: 'encoded_text', tokens }] },
  loss_fn_inputs: {
    target_tokens: { data: tokens, dtype: 'int64' as const, shape: [tokens.length] },
    weights: { data: tokens.map(() => 1), dtype: 'float32' as const, shape: [tokens.length] },
  },
});

/** One round of the SDK's calls, every payload carrying the canary values; statuses are not checked. */
async function round(n: number): Promise<number[]> {
  const statuses: number[] = [];
  const call = async (endpoint: string, body: unknown, headers?: Record<string, string>) => {
    const answer = await client.raw('POST', `/api/v1/${endpoint}`, body, headers);
    statuses.push(answer.status);
    return answer.body as Record<string, string>;
  };
  const session = await call('create_session', {
    tags: [`tag-${CANARY}`],
    user_metadata: { note: `meta-${CANARY}`, token: TOKEN },
    sdk_version: `sdk-${CANARY}`,
  });
  const sessionId = session.session_id ?? 'sess-none';
  const model = await call('create_model', {
    session_id: sessionId,
    model_seq_id: n,
    base_model: 'reference/byte-lm',
    lora_config: { rank: 4 },
    user_metadata: { secret: CANARY },
  });
  const modelId = model.model_id ?? 'model-none';
  await call('forward_backward', {
    model_id: modelId,
    seq_id: 1,
    forward_backward_input: {
      data: [datum([TOKEN, TOKEN + 1, 7])],
      loss_fn: 'cross_entropy',
      loss_fn_config: { note: CANARY },
    },
  });
  await call('optim_step', { model_id: modelId, seq_id: 2, adam_params: { learning_rate: 0.000123456789 } });
  const sampling = await call('create_sampling_session', {
    session_id: sessionId,
    sampling_session_seq_id: n,
    base_model: 'reference/byte-lm',
  });
  await call('asample', {
    sampling_session_id: sampling.sampling_session_id ?? 'samp-none',
    seq_id: 0,
    prompt: { chunks: [{ tokens: [TOKEN, 3] }] },
    sampling_params: { max_tokens: 3, stop: [`stop-${CANARY}`] },
  });
  // Refused requests echo some of their input in the answer; none of it may reach the logs.
  await call('forward_backward', `{"model_id": "${modelId}", "seq_id": 3, "broken": "${CANARY}`);
  await call('asample', {
    sampling_session_id: 'samp-x',
    seq_id: 0,
    prompt: { chunks: [{ tokens: [CANARY] }] },
    sampling_params: { max_tokens: 1 },
  });
  await call('create_session', { user_metadata: { [CANARY]: 1e300 } });
  await call('create_session', {}, { 'x-api-key': WRONG_KEY });
  return statuses;
}

describe('logs', () => {
  it('the capture sees what the logger writes', () => {
    const stop = startCapture();
    try {
      logger.warn('capture probe', { probe: 'probe-3141' });
    } finally {
      stop();
    }
    expect(captured.join('')).toContain('probe-3141');
    captured.length = 0;
  });

  it('never contain payload values or API keys, on success, refusal and injected failure', async () => {
    faults = createFaultInjector({
      seed: 17,
      rates: { throttle: 0.1, serverError: 0.1, timeoutAfterWrite: 0.1, transactionConflict: 0.2 },
    });
    detach = faults.attach(awsClients());
    const statuses: number[] = [];
    const stop = startCapture();
    try {
      for (let n = 0; n < 4; n++) statuses.push(...(await round(n)));
    } finally {
      stop();
      faults.off();
    }
    const text = captured.join('');
    // The runs did reach the error paths (otherwise this test would prove little).
    expect(faults.calls.TransactWriteItems ?? 0).toBeGreaterThan(0);
    expect(faults.total).toBeGreaterThan(0);
    expect(statuses.filter((status) => status >= 500).length).toBeGreaterThan(0);
    expect(statuses.filter((status) => status === 200).length).toBeGreaterThan(0);
    expect(text).toMatch(/"level":"(WARN|ERROR)"/);
    // Error details are logged under a key the logger keeps (not the reserved `message`): injected
    // transient failures are answered 503 and logged by name.
    expect(text).not.toMatch(/reserved key/);
    expect(text).toMatch(/"error":"(InternalServerError|SlowDown|InternalError|TimeoutError)"/);

    for (const secret of [CANARY, String(TOKEN), String(TOKEN + 1), '0.000123456789', apiKey, WRONG_KEY]) {
      expect(text.includes(secret), `a log line contains ${secret.slice(0, 12)}…`).toBe(false);
    }
  });
});
