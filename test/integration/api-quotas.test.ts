import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { GetCommand, ScanCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { resetConfig } from '../../shared/base/config.js';
import { windowAt } from '../../shared/domain/quota-rules.js';
import { createApiKey, createOperatorKey } from '../../shared/repositories/api-keys.js';
import { rateKey } from '../../shared/repositories/quotas.js';
import { type ApiResponse, handleApiRequest } from '../../shared/services/api/router.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';

/**
 * Per-tenant submit quotas and the operators' status-read quota, through the API edge on the local
 * cloud, at a fixed clock so every request lands in one known window. Limits are set low here
 * (the suite's defaults are generous): 3 submits per second per tenant, 2 operator reads per second.
 */

const SUBMITS = 3;
const OPERATOR_READS = 2;
let cloud: TestCloud;
let acme: string;
let zeta: string;
let operator: string;
// Near the real time: counter items carry a TTL derived from their window.
let clock = Date.now();
const saved: Record<string, string | undefined> = {};

const QUOTA_ENV = {
  SUBMITS_PER_SECOND: String(SUBMITS),
  OPERATOR_READS_PER_SECOND: String(OPERATOR_READS),
  EMIT_METRICS: 'true',
};

beforeAll(async () => {
  cloud = await setupTestCloud();
  for (const name of Object.keys(QUOTA_ENV)) saved[name] = process.env[name];
  Object.assign(process.env, QUOTA_ENV);
  cloud.applyEnv();
  acme = await createApiKey(cloud.clients.doc, cloud.names.tables.registry, 'acme');
  zeta = await createApiKey(cloud.clients.doc, cloud.names.tables.registry, 'zeta');
  operator = await createOperatorKey(cloud.clients.doc, cloud.names.tables.registry, 'ops@example.com');
});

afterAll(() => {
  for (const [name, value] of Object.entries(saved)) {
    if (value === undefined) delete process.env[name];
    else process.env[name] = value;
  }
  resetConfig();
});

async function call(path: string, key: string | undefined, body?: unknown, method = 'POST') {
  const response = await handleApiRequest(
    {
      method,
      path,
      headers: key === undefined ? {} : { 'x-api-key': key },
      ...(body === undefined ? {} : { body: new TextEncoder().encode(JSON.stringify(body)) }),
    },
    { clients: cloud.clients, now: () => clock },
  );
  return response as ApiResponse;
}

async function storedCounts(): Promise<{ futures: number; models: number; sessions: number }> {
  const scan = async (table: string, filter?: string) => {
    const page = await cloud.clients.doc.send(
      new ScanCommand({
        TableName: table,
        ConsistentRead: true,
        ...(filter === undefined
          ? {}
          : { FilterExpression: 'begins_with(pk, :p)', ExpressionAttributeValues: { ':p': filter } }),
      }),
    );
    return page.Items?.length ?? 0;
  };
  return {
    futures: await scan(cloud.names.tables.futures),
    models: await scan(cloud.names.tables.models),
    sessions: await scan(cloud.names.tables.registry, 'session#'),
  };
}

function nextWindow(): void {
  clock = windowAt(clock).end + 100;
}

describe('submits per tenant', () => {
  it('a tenant over its limit gets 429 with Retry-After and nothing stored; another tenant is unaffected', async () => {
    nextWindow();
    const metricLines: string[] = [];
    const spy = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
      metricLines.push(String(chunk));
      return true;
    });
    try {
      const session = await call('/api/v1/create_session', acme, {});
      expect(session.status).toBe(200);
      const sessionId = (session.body as { session_id: string }).session_id;
      const createModel = (seq: number) =>
        call('/api/v1/create_model', acme, {
          session_id: sessionId,
          model_seq_id: seq,
          base_model: 'reference/byte-lm',
          lora_config: { rank: 4 },
        });
      expect((await createModel(0)).status).toBe(200);
      expect((await createModel(1)).status).toBe(200);
      const before = await storedCounts();

      // The fourth submit in the window: refused before anything is written.
      const refused = await createModel(2);
      expect(refused.status).toBe(429);
      expect(refused.headers).toEqual({ 'retry-after': '1', 'retry-after-ms': '900' });
      expect((refused.body as { error: string }).error).toMatch(/3 per second \(SUBMITS_PER_SECOND\)/);
      expect(await storedCounts()).toEqual(before);
      // Refused again from this container's memory of the full window, with the same answer.
      expect((await call('/api/v1/create_session', acme, {})).status).toBe(429);
      expect(await storedCounts()).toEqual(before);

      // Another tenant in the same window has its own budget.
      expect((await call('/api/v1/create_session', zeta, {})).status).toBe(200);
      // Reads are not submits: the throttled tenant still reads.
      expect((await call('/api/v1/get_server_capabilities', acme, undefined, 'GET')).status).toBe(200);

      // The next window has room again.
      nextWindow();
      expect((await createModel(2)).status).toBe(200);
    } finally {
      spy.mockRestore();
    }
    const throttled = metricLines.filter((line) => line.includes('"ThrottledSubmits":1'));
    expect(throttled).toHaveLength(2);
    expect(JSON.parse(throttled[0]!)).toMatchObject({ Pool: 'default', ThrottledSubmits: 1 });
  });

  it('an intake reads beside the quota write, writes nothing when refused, and the refusal is its answer', async () => {
    nextWindow();
    const payloads = async () =>
      (
        await cloud.clients.s3.send(
          new ListObjectsV2Command({ Bucket: cloud.names.bucket, Prefix: 'payloads/' }),
        )
      ).KeyCount ?? 0;
    // What the client sent and saw, in order: the seq counter's read and the quota's answer.
    const events: string[] = [];
    const name = 'quotaBesideReads';
    cloud.clients.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as { Key?: { pk?: unknown } };
        const pk = typeof input.Key?.pk === 'string' ? input.Key.pk : '';
        if (context.commandName === 'GetItemCommand' && pk.startsWith('seq#'))
          events.push('counter read sent');
        try {
          return await next(args);
        } finally {
          if (context.commandName === 'UpdateItemCommand' && pk.startsWith('rate#'))
            events.push('quota answered');
        }
      },
      { step: 'initialize', name, override: true },
    );
    try {
      const session = await call('/api/v1/create_session', acme, {});
      const model = await call('/api/v1/create_model', acme, {
        session_id: (session.body as { session_id: string }).session_id,
        model_seq_id: 0,
        base_model: 'reference/byte-lm',
        lora_config: { rank: 4 },
      });
      const modelId = (model.body as { model_id: string }).model_id;
      const pass = (seqId: number, id = modelId) =>
        call('/api/v1/forward_backward', acme, {
          model_id: id,
          seq_id: seqId,
          forward_backward_input: {
            data: [
              {
                model_input: { chunks: [{ type: 'encoded_text', tokens: [1, 2, 3] }] },
                loss_fn_inputs: {
                  target_tokens: { data: [2, 3, 4], dtype: 'int64', shape: [3] },
                  weights: { data: [1, 1, 1], dtype: 'float32', shape: [3] },
                },
              },
            ],
            loss_fn: 'cross_entropy',
          },
        });
      events.length = 0;
      const accepted = await pass(1);
      expect(accepted.status).toBe(200);
      // The third submit of the window: its counter read went out before the quota had answered.
      expect(events.indexOf('counter read sent')).toBeGreaterThanOrEqual(0);
      expect(events.indexOf('counter read sent')).toBeLessThan(events.indexOf('quota answered'));

      const before = { ...(await storedCounts()), payloads: await payloads() };
      const refused = await pass(2);
      expect(refused.status).toBe(429);
      expect({ ...(await storedCounts()), payloads: await payloads() }).toEqual(before);
      // Whatever else the request meets, the refusal answers: an unknown model, a malformed body.
      expect((await pass(3, 'model-unknown')).status).toBe(429);
      expect((await call('/api/v1/optim_step', acme, { model_id: modelId })).status).toBe(429);
      expect({ ...(await storedCounts()), payloads: await payloads() }).toEqual(before);
    } finally {
      cloud.clients.doc.middlewareStack.remove(name);
    }
  });

  it('bad or missing keys never count against a tenant', async () => {
    nextWindow();
    for (let i = 0; i < 10; i++) {
      expect((await call('/api/v1/create_session', undefined, {})).status).toBe(401);
      expect((await call('/api/v1/create_session', `tml-${'x'.repeat(43)}`, {})).status).toBe(401);
    }
    for (let i = 0; i < SUBMITS; i++)
      expect((await call('/api/v1/create_session', acme, {})).status).toBe(200);
    expect((await call('/api/v1/create_session', acme, {})).status).toBe(429);
  });
});

describe('operator reads of the status data (hardening finding 6)', () => {
  const counter = async () => {
    const answer = await cloud.clients.doc.send(
      new GetCommand({
        TableName: cloud.names.tables.registry,
        Key: { pk: rateKey('operator-read', 'all', windowAt(clock).start) },
        ConsistentRead: true,
      }),
    );
    return answer.Item?.n as number | undefined;
  };

  it('unauthenticated requests are refused before they count: operators keep their whole budget', async () => {
    nextWindow();
    // A flood of missing, malformed, unknown and tenant keys, all in the operators' window.
    const refusals = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        call('/status/data', [undefined, 'nonsense', `tso-${'y'.repeat(43)}`, acme][i % 4], undefined, 'GET'),
      ),
    );
    expect(new Set(refusals.map((answer) => answer.status))).toEqual(new Set([401, 403]));
    expect(await counter()).toBeUndefined();

    for (let i = 0; i < OPERATOR_READS; i++) {
      expect((await call('/status/data', operator, undefined, 'GET')).status).toBe(200);
    }
    expect(await counter()).toBe(OPERATOR_READS);
    const over = await call('/status/data', operator, undefined, 'GET');
    expect(over.status).toBe(429);
    expect(over.headers?.['retry-after']).toBe('1');
    expect((over.body as { error: string }).error).toMatch(/OPERATOR_READS_PER_SECOND/);
  });
});
