import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AwsClients } from '../../shared/aws/clients.js';
import { resetConfig } from '../../shared/base/config.js';
import { createApiKey } from '../../shared/repositories/api-keys.js';
import { type ApiResponse, handleApiRequest } from '../../shared/services/api/router.js';
import { type CallLog, loggedClients } from '../support/call-log.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { completeFuture } from '../support/futures.js';

/**
 * What one request costs the API in calls to DynamoDB and S3, and how many of them run one after
 * another (each a round trip on the request's path; issue #16's latency follows from both). Every
 * call the API edge makes is recorded on its own clients (test/support/call-log.ts); the sequential
 * count is the longest chain of calls each starting after the previous ended.
 * Counted with a warm container (the key was used once before), as a closed loop's requests are.
 * `PRINT_CALL_COUNTS=1` prints the table.
 */

let cloud: TestCloud;
let clients: AwsClients;
let log: CallLog;
let key: string;
let modelId: string;
let samplingSessionId: string;
const saved: Record<string, string | undefined> = {};
const ENV = { LONG_POLL_SECONDS: '5' };

const isS3Call = (call: string) => /^(Get|Put|Head|Delete)Object /.test(call);

async function call(path: string, body: unknown): Promise<ApiResponse> {
  return (await handleApiRequest(
    {
      method: 'POST',
      path: `/api/v1/${path}`,
      headers: { 'x-api-key': key },
      body: new TextEncoder().encode(JSON.stringify(body)),
    },
    { clients },
  )) as ApiResponse;
}

interface Counted {
  readonly response: ApiResponse;
  /** `<Operation> <table or key prefix>` in the order sent (test/support/call-log.ts). */
  readonly calls: readonly string[];
  readonly dynamodb: number;
  readonly s3: number;
  readonly sequential: number;
}

const table: Record<string, Counted> = {};

async function counted(label: string, request: () => Promise<ApiResponse>): Promise<Counted> {
  log.reset();
  const response = await request();
  const calls = [...log.calls];
  const result = {
    response,
    calls,
    dynamodb: calls.filter((c) => !isS3Call(c)).length,
    s3: calls.filter(isS3Call).length,
    sequential: log.depth(),
  };
  table[label] = result;
  return result;
}

const tokens = [5, 6, 7, 8, 9];
const datum = {
  model_input: { chunks: [{ type: 'encoded_text', tokens: tokens.slice(0, -1) }] },
  loss_fn_inputs: {
    target_tokens: { data: tokens.slice(1), dtype: 'int64', shape: [tokens.length - 1] },
    weights: { data: tokens.slice(1).map(() => 1), dtype: 'float32', shape: [tokens.length - 1] },
  },
};
let seqId = 1;

beforeAll(async () => {
  cloud = await setupTestCloud();
  for (const name of Object.keys(ENV)) saved[name] = process.env[name];
  Object.assign(process.env, ENV);
  cloud.applyEnv();
  ({ clients, log } = loggedClients(cloud.endpoints, cloud.prefix));
  key = await createApiKey(cloud.clients.doc, cloud.names.tables.registry, 'counted');
  const session = await call('create_session', { tags: [] });
  const sessionId = (session.body as { session_id: string }).session_id;
  const model = await call('create_model', {
    session_id: sessionId,
    model_seq_id: 0,
    base_model: 'reference/byte-lm',
    lora_config: { rank: 4 },
  });
  modelId = (model.body as { model_id: string }).model_id;
  const sampling = await call('create_sampling_session', {
    session_id: sessionId,
    sampling_session_seq_id: 0,
    base_model: 'reference/byte-lm',
  });
  samplingSessionId = (sampling.body as { sampling_session_id: string }).sampling_session_id;
});

afterAll(() => {
  if (process.env.PRINT_CALL_COUNTS) {
    const lines = Object.entries(table).map(
      ([label, c]) =>
        `${label}: ${c.dynamodb} DynamoDB + ${c.s3} S3, ${c.sequential} sequential: ${c.calls.join(', ')}`,
    );
    console.info(lines.join('\n'));
  }
  for (const [name, value] of Object.entries(saved)) {
    if (value === undefined) delete process.env[name];
    else process.env[name] = value;
  }
  resetConfig();
});

function submitForwardBackward(): Promise<ApiResponse> {
  return call('forward_backward', {
    model_id: modelId,
    seq_id: seqId++,
    forward_backward_input: { data: [datum], loss_fn: 'cross_entropy' },
  });
}

describe('calls per request, warm container', () => {
  it('forward_backward: quota and counter side by side, then the payload, then the transaction', async () => {
    const c = await counted('forward_backward', submitForwardBackward);
    expect(c.response.status).toBe(200);
    // No key lookup: the warm container knows the key (API_KEY_CACHE_SECONDS).
    expect(c.calls.filter((x) => x.startsWith('GetItem '))).toEqual(['GetItem registry']);
    expect({ dynamodb: c.dynamodb, s3: c.s3, sequential: c.sequential }).toEqual({
      dynamodb: 3,
      s3: 1,
      sequential: 3,
    });
  });

  it('optim_step: the same four calls', async () => {
    const c = await counted('optim_step', () =>
      call('optim_step', {
        model_id: modelId,
        seq_id: seqId++,
        adam_params: { learning_rate: 0.001, beta1: 0.9, beta2: 0.95, eps: 1e-8 },
      }),
    );
    expect(c.response.status).toBe(200);
    expect({ dynamodb: c.dynamodb, s3: c.s3, sequential: c.sequential }).toEqual({
      dynamodb: 3,
      s3: 1,
      sequential: 3,
    });
  });

  it('asample on a base model: the same four calls', async () => {
    const c = await counted('asample', () =>
      call('asample', {
        sampling_session_id: samplingSessionId,
        seq_id: 1,
        num_samples: 1,
        prompt: { chunks: [{ type: 'encoded_text', tokens: [1, 2, 3] }] },
        sampling_params: { max_tokens: 4, temperature: 1 },
      }),
    );
    expect(c.response.status).toBe(200);
    expect({ dynamodb: c.dynamodb, s3: c.s3, sequential: c.sequential }).toEqual({
      dynamodb: 3,
      s3: 1,
      sequential: 3,
    });
    // The next call on the same sampling session (an RL batch's): its record is known, not read again.
    const next = await counted('asample, same session', () =>
      call('asample', {
        sampling_session_id: samplingSessionId,
        seq_id: 2,
        num_samples: 1,
        prompt: { chunks: [{ type: 'encoded_text', tokens: [1, 2, 3] }] },
        sampling_params: { max_tokens: 4, temperature: 1 },
      }),
    );
    expect(next.response.status).toBe(200);
    expect(next.calls.filter((entry) => !isS3Call(entry)).sort()).toEqual([
      'TransactWriteItems Put:registry+ConditionCheck:registry+Put:futures+Put:registry',
      'UpdateItem registry',
    ]);
    expect(next.sequential).toBe(3);
  });

  it('retrieve_future of a finished future: the head, then its outcome; no writes', async () => {
    const submitted = await submitForwardBackward();
    const requestId = (submitted.body as { request_id: string }).request_id;
    await completeFuture(requestId, { metrics: { loss: 1 } }, cloud.clients);
    const c = await counted('retrieve (done)', () => call('retrieve_future', { request_id: requestId }));
    expect(c.response.body).toEqual({ metrics: { loss: 1 } });
    expect(c.calls).toEqual(['GetItem futures', 'GetItem futures']);
    expect(c.sequential).toBe(2);
  });

  it('retrieve_future that waits less than POLL_SLOT_AFTER_MS: reads of its row only, no slot taken', async () => {
    const submitted = await submitForwardBackward();
    const requestId = (submitted.body as { request_id: string }).request_id;
    const done = new Promise((resolve) => setTimeout(resolve, 250)).then(() =>
      completeFuture(requestId, { metrics: { loss: 2 } }, cloud.clients),
    );
    const c = await counted('retrieve (waits 250 ms)', () =>
      call('retrieve_future', { request_id: requestId }),
    );
    await done;
    expect(c.response.body).toEqual({ metrics: { loss: 2 } });
    // The head, then the re-reads of its outcome (every 100 ms with no commit signal, as on AWS).
    expect(new Set(c.calls)).toEqual(new Set(['GetItem futures']));
    expect(c.dynamodb).toBeGreaterThanOrEqual(2);
    expect(c.dynamodb).toBeLessThanOrEqual(6);
  });
});
