import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { compress, init as initZstd } from '@bokuweb/zstd-wasm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { handler } from '../../functions/api/handler.js';
import { toHttpApiEvent, toHttpReply } from '../../local/runtime/triggers/http-event.js';
import { BASE_MODELS_VAR, resetConfig } from '../../shared/base/config.js';
import type { FutureRow } from '../../shared/domain/records.js';
import { createApiKey } from '../../shared/repositories/api-keys.js';
import { readStoredPayload } from '../../shared/repositories/payloads.js';
import { decodeForwardBackwardRequest } from '../../shared/wire/forward-backward-request.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { completeFuture } from '../support/futures.js';
import { decodeForwardBackwardOutput } from '../support/wire/decode-results.js';
import { float32Tensor, int64Tensor, pbForwardBackward, textChunk } from '../support/wire/requests.js';

/**
 * The api function as API Gateway (HTTP API, payload 2.0) calls it, without the local HTTP server
 * in between: a protobuf body arrives base64-encoded (`isBase64Encoded: true`) and must reach S3 as
 * the same bytes, never through UTF-8 (W3); a protobuf answer leaves base64-encoded with its
 * content type (W2).
 */

let cloud: TestCloud;
let key = '';

/** The event API Gateway builds for this request (local/runtime/triggers/http-event.ts models it). */
function event(path: string, body: Uint8Array | string, headers: Record<string, string> = {}) {
  return toHttpApiEvent({
    method: 'POST',
    url: `/api/v1/${path}`,
    headers: { 'x-api-key': key, 'content-type': 'application/json', ...headers },
    body: Buffer.from(body),
    sourceIp: '127.0.0.1',
  });
}

async function json<T>(path: string, body: unknown): Promise<T> {
  const answer = await handler(event(path, JSON.stringify(body)));
  expect(answer.statusCode, answer.body).toBe(200);
  expect(answer.isBase64Encoded).toBeUndefined();
  return JSON.parse(answer.body ?? '') as T;
}

let modelId = '';

afterAll(() => {
  delete process.env[BASE_MODELS_VAR];
  resetConfig();
});

beforeAll(async () => {
  cloud = await setupTestCloud();
  cloud.applyEnv();
  // The token ids below carry 0xff bytes and lie far past the reference model's 256: a vocabulary
  // that holds them, so intake takes them (B2) and the bytes are what is checked.
  process.env[BASE_MODELS_VAR] = JSON.stringify([{ name: 'reference/byte-lm', vocab_size: 2 ** 31 }]);
  resetConfig();
  await initZstd();
  key = await createApiKey(cloud.clients.doc, cloud.names.tables.registry, 'acme');
  const { session_id } = await json<{ session_id: string }>('create_session', { tags: [] });
  ({ model_id: modelId } = await json<{ model_id: string }>('create_model', {
    session_id,
    model_seq_id: 0,
    base_model: 'reference/byte-lm',
    lora_config: { rank: 4 },
  }));
});

// Token ids and a weight whose little-endian bytes hold 0xff (never valid UTF-8 on their own).
const TOKENS = [255, 65_535, 0x7fff_ffff, 0xff_00ff];
const WEIGHTS = [0.99999994, 1, 0.5, 0.25]; // 0.99999994 is ff ff 7f 3f
const body = () =>
  pbForwardBackward({
    modelId,
    seqId: 1,
    data: [
      {
        modelInput: [textChunk(TOKENS)],
        lossFnInputs: {
          target_tokens: int64Tensor(TOKENS.map((token) => token - 1)),
          weights: float32Tensor(WEIGHTS),
        },
      },
    ],
    lossFn: 'cross_entropy',
  });

describe('the api function behind API Gateway', () => {
  let requestId = '';

  it('takes a base64 protobuf body as bytes: 0xff bytes reach S3 unchanged, and it is accepted', async () => {
    const bytes = body();
    expect(bytes.includes(0xff)).toBe(true);
    expect(() => new TextDecoder('utf-8', { fatal: true }).decode(bytes)).toThrow();
    // Through UTF-8 the bytes would not survive: the test would see it.
    expect(Buffer.from(Buffer.from(bytes).toString('utf8'), 'utf8').equals(Buffer.from(bytes))).toBe(false);

    const request = event('forward_backward', bytes, { 'content-type': 'application/x-protobuf' });
    expect(request.isBase64Encoded).toBe(true);
    expect(Buffer.from(request.body ?? '', 'base64').equals(Buffer.from(bytes))).toBe(true);
    const answer = await handler(request);
    expect(answer.statusCode, answer.body).toBe(200);
    const future = JSON.parse(answer.body ?? '') as { request_id: string; model_id: string };
    expect(future.model_id).toBe(modelId);
    requestId = future.request_id;

    const row = (
      await cloud.clients.doc.send(
        new GetCommand({ TableName: cloud.names.tables.futures, Key: { request_id: requestId } }),
      )
    ).Item as FutureRow;
    const stored = await readStoredPayload(cloud.clients.s3, cloud.names.bucket, row.payload_key!);
    expect(stored.format).toBe('tinker-pb');
    const message = decodeForwardBackwardRequest(stored.bytes);
    const datum = message.input.data[0]!;
    expect(Array.from(datum.model_input.chunks[0]!.tokens)).toEqual(TOKENS);
    expect(Array.from(datum.loss_fn_inputs.target_tokens!.data, Number)).toEqual(TOKENS.map((t) => t - 1));
    expect(Array.from(datum.loss_fn_inputs.weights!.data, Number)).toEqual(
      Array.from(Float32Array.from(WEIGHTS)),
    );
  });

  it('takes the same step zstd-compressed as the same request (its original future)', async () => {
    const request = event('forward_backward', compress(body(), 3), {
      'content-type': 'application/x-protobuf',
      'content-encoding': 'zstd',
    });
    expect(request.isBase64Encoded).toBe(true);
    const answer = await handler(request);
    expect(answer.statusCode, answer.body).toBe(200);
    expect((JSON.parse(answer.body ?? '') as { request_id: string }).request_id).toBe(requestId);
  });

  it('refuses the bytes read as text: a base64 body decoded to UTF-8 is another message', async () => {
    const mangled = Buffer.from(Buffer.from(body()).toString('utf8'), 'utf8');
    const answer = await handler(
      event('forward_backward', mangled, { 'content-type': 'application/x-protobuf' }),
    );
    expect(answer.statusCode).toBeGreaterThanOrEqual(400);
    expect(answer.statusCode).toBeLessThan(500);
  });

  it('answers a completed forward_backward as base64 protobuf when asked, JSON otherwise', async () => {
    const result = {
      loss_fn_output_type: 'cross_entropy',
      loss_fn_outputs: [{ logprobs: { data: [-1.5, -2, -0.25, -3], dtype: 'float32' as const, shape: [4] } }],
      metrics: { 'loss:mean': 1.75 },
    };
    await completeFuture(requestId, result, cloud.clients);

    const asProtobuf = await handler(
      event('retrieve_future', JSON.stringify({ request_id: requestId }), {
        accept: 'application/x-protobuf, application/json',
      }),
    );
    expect(asProtobuf.statusCode).toBe(200);
    expect(asProtobuf.isBase64Encoded).toBe(true);
    expect(asProtobuf.headers?.['content-type']).toBe('application/x-protobuf');
    const reply = toHttpReply(asProtobuf);
    expect(reply.body.equals(Buffer.from(asProtobuf.body ?? '', 'base64'))).toBe(true);
    const decoded = decodeForwardBackwardOutput(reply.body);
    expect(decoded.loss_fn_output_type).toBe('cross_entropy');
    expect(decoded.metrics).toEqual(result.metrics);
    expect(decoded.loss_fn_outputs).toEqual(result.loss_fn_outputs);

    const asJson = await handler(event('retrieve_future', JSON.stringify({ request_id: requestId })));
    expect(asJson.statusCode).toBe(200);
    expect(asJson.isBase64Encoded).toBeUndefined();
    expect(asJson.headers?.['content-type']).toBe('application/json');
    expect(JSON.parse(asJson.body ?? '')).toEqual(result);
  });

  it.each([
    ['application/x-protobuf', 'application/x-protobuf'],
    ['application/x-protobuf;q=0, application/json', 'application/json'],
    ['application/x-protobufXYZ', 'application/json'],
    ['application/json;q=1, application/x-protobuf;q=0.5', 'application/json'],
    ['*/*', 'application/json'],
  ])('answers Accept: %s with %s (RFC 9110: whole types, q-values)', async (accept, contentType) => {
    const answer = await handler(
      event('retrieve_future', JSON.stringify({ request_id: requestId }), { accept }),
    );
    expect(answer.statusCode).toBe(200);
    expect(answer.headers?.['content-type']).toBe(contentType);
  });
});
