import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { ScanCommand } from '@aws-sdk/lib-dynamodb';
import { compress, init as initZstd } from '@bokuweb/zstd-wasm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import { type FutureRow, registryKey } from '../../shared/domain/records.js';
import { readCheckpointName } from '../../shared/repositories/checkpoints/names.js';
import { DType } from '../../shared/wire/gen/tinker_public_pb.js';
import { type ApiHarness, startApiHarness } from '../support/api-harness.js';
import { failFuture } from '../support/futures.js';
import {
  float32Tensor,
  int32Bytes,
  int64Tensor,
  pbDatum,
  pbForwardBackward,
  type TensorInit,
} from '../support/wire/requests.js';

let api: ApiHarness;
let client: TinkerClient;
let key: string;
let sessionId: string;

beforeAll(async () => {
  await initZstd();
  api = await startApiHarness();
  ({ client, key } = await api.tenant('acme'));
  ({ session_id: sessionId } = await client.createSession({ tags: [] }));
});

afterAll(async () => {
  await api?.stop();
});

let modelSeq = 100;
async function newModel(): Promise<string> {
  const future = await client.createModel({
    session_id: sessionId,
    model_seq_id: modelSeq++,
    base_model: 'reference/byte-lm',
    lora_config: { rank: 4 },
  });
  return future.model_id;
}

function fbBody(modelId: string, seqId: number, token = 1) {
  return {
    model_id: modelId,
    seq_id: seqId,
    forward_backward_input: {
      data: [
        {
          model_input: { chunks: [{ type: 'encoded_text', tokens: [token, 2, 3] }] },
          loss_fn_inputs: { target_tokens: { data: [2, 3, 4], dtype: 'int64' as const, shape: [3] } },
        },
      ],
      loss_fn: 'cross_entropy',
    },
    type: 'forward_backward',
  };
}

async function rowsOf(modelId: string): Promise<FutureRow[]> {
  const rows: FutureRow[] = [];
  let start: Record<string, unknown> | undefined;
  do {
    const page = await api.cloud.clients.doc.send(
      new ScanCommand({
        TableName: api.cloud.names.tables.futures,
        FilterExpression: 'model_id = :model',
        ExpressionAttributeValues: { ':model': modelId },
        ExclusiveStartKey: start,
        ConsistentRead: true,
      }),
    );
    rows.push(...((page.Items ?? []) as FutureRow[]));
    start = page.LastEvaluatedKey;
  } while (start);
  return rows;
}

async function seqsOf(modelId: string): Promise<number[]> {
  return (await rowsOf(modelId)).map((row) => row.seq ?? -1).sort((a, b) => a - b);
}

/** A protobuf forward_backward body (SDK 0.25), raw or zstd-compressed, exactly as given. */
async function sendProtobuf(bytes: Uint8Array, zstd = false): Promise<{ status: number; body: unknown }> {
  const response = await fetch(`${api.url}/api/v1/forward_backward`, {
    method: 'POST',
    headers: {
      'x-api-key': key,
      'content-type': 'application/x-protobuf',
      ...(zstd ? { 'content-encoding': 'zstd' } : {}),
    },
    body: zstd ? compress(bytes, 3) : bytes,
  });
  return { status: response.status, body: await response.json() };
}

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

describe('duplicates (R7)', () => {
  it('a retried submit returns the original future and stores nothing', async () => {
    const modelId = await newModel();
    const first = await client.raw('POST', '/api/v1/forward_backward', fbBody(modelId, 1));
    expect(first.status).toBe(200);
    const before = await api.counts();
    const again = await client.raw('POST', '/api/v1/forward_backward', fbBody(modelId, 1));
    expect(again).toEqual(first);
    expect(await api.counts()).toEqual(before);
  });

  it('the same seq_id with another payload is a 400 that says so, and stores nothing', async () => {
    const modelId = await newModel();
    expect((await client.raw('POST', '/api/v1/forward_backward', fbBody(modelId, 1))).status).toBe(200);
    const before = await api.counts();
    const other = await client.raw('POST', '/api/v1/forward_backward', fbBody(modelId, 1, 9));
    expect(other).toEqual({
      status: 400,
      body: {
        error: `seq_id 1 of model ${modelId} was already used with a different payload`,
        field: 'seq_id',
      },
    });
    const otherType = await client.raw('POST', '/api/v1/optim_step', {
      model_id: modelId,
      seq_id: 1,
      adam_params: {},
    });
    expect(otherType.status).toBe(400);
    expect(await api.counts()).toEqual(before);
  });

  it('protobuf and JSON: the same step is the same request whatever the wire (the fingerprint is the canonical form)', async () => {
    const modelId = await newModel();
    const first = await client.raw('POST', '/api/v1/forward_backward', fbBody(modelId, 1));
    expect(first.status).toBe(200);
    const before = await api.counts();
    // fbBody's datum on the protobuf wire, as the SDK 0.25 would send it, and in other spellings of
    // the same values: INT32 targets (widened to int64), no shape (1-D), compressed.
    const same = (targets: TensorInit) =>
      pbForwardBackward({ modelId, seqId: 1, data: [pbDatum([1, 2, 3], { target_tokens: targets })] });
    const int32Targets: TensorInit = {
      encoding: { case: 'dense', value: int32Bytes([2, 3, 4]) },
      dtype: DType.DTYPE_INT32,
      shape: [3n],
    };
    const spellings: [string, Uint8Array, boolean][] = [
      ['protobuf', same(int64Tensor([2, 3, 4])), false],
      ['zstd', same(int64Tensor([2, 3, 4])), true],
      ['INT32 targets', same(int32Targets), false],
      ['no shape', same({ ...int64Tensor([2, 3, 4]), shape: [] }), false],
    ];
    for (const [name, bytes, zstd] of spellings) {
      expect(await sendProtobuf(bytes, zstd), name).toEqual(first);
    }
    expect(await api.counts()).toEqual(before);

    const refused = {
      status: 400,
      body: {
        error: `seq_id 1 of model ${modelId} was already used with a different payload`,
        field: 'seq_id',
      },
    };
    const others: [string, Uint8Array][] = [
      ['another token', pbForwardBackward({ modelId, seqId: 1, data: [pbDatum([9, 2, 3])] })],
      [
        'forward_only',
        pbForwardBackward({ modelId, seqId: 1, forwardOnly: true, data: [pbDatum([1, 2, 3])] }),
      ],
      [
        'another loss input',
        pbForwardBackward({
          modelId,
          seqId: 1,
          data: [pbDatum([1, 2, 3], { weights: float32Tensor([1, 1, 1]) })],
        }),
      ],
    ];
    for (const [name, bytes] of others) {
      expect(await sendProtobuf(bytes), name).toEqual(refused);
      expect(await sendProtobuf(bytes, true), `${name} (zstd)`).toEqual(refused);
    }
    // And the JSON resend of the original is still the original future.
    expect(await client.raw('POST', '/api/v1/forward_backward', fbBody(modelId, 1))).toEqual(first);
    expect(await api.counts()).toEqual(before);
  });

  it('protobuf first, then JSON: the JSON resend is the protobuf future; other JSON data is a 400', async () => {
    const modelId = await newModel();
    const first = await sendProtobuf(
      pbForwardBackward({ modelId, seqId: 1, data: [pbDatum([1, 2, 3])] }),
      true,
    );
    expect(first.status).toBe(200);
    const before = await api.counts();
    expect(await client.raw('POST', '/api/v1/forward_backward', fbBody(modelId, 1))).toEqual(first);
    expect((await client.raw('POST', '/api/v1/forward_backward', fbBody(modelId, 1, 9))).status).toBe(400);
    expect(await api.counts()).toEqual(before);
    expect(await seqsOf(modelId)).toEqual([1, 2]);
  });

  it('a lower seq_id that is not a retry is out of order (400)', async () => {
    const modelId = await newModel();
    expect((await client.raw('POST', '/api/v1/forward_backward', fbBody(modelId, 5))).status).toBe(200);
    const before = await api.counts();
    for (const seqId of [3, 5 - 1]) {
      const late = await client.raw('POST', '/api/v1/forward_backward', fbBody(modelId, seqId));
      expect(late).toEqual({
        status: 400,
        body: {
          error: `seq_id ${seqId} is out of order: model ${modelId} already accepted seq_id 5`,
          field: 'seq_id',
        },
      });
    }
    expect(await api.counts()).toEqual(before);
    expect((await client.raw('POST', '/api/v1/forward_backward', fbBody(modelId, 9))).status).toBe(200);
    expect(await seqsOf(modelId)).toEqual([1, 2, 3]);
  });

  it('create_model is idempotent on (session, model_seq_id)', async () => {
    const body = {
      session_id: sessionId,
      model_seq_id: 1,
      base_model: 'reference/byte-lm',
      lora_config: { rank: 4 },
    };
    const first = await client.raw('POST', '/api/v1/create_model', body);
    const before = await api.counts();
    expect(await client.raw('POST', '/api/v1/create_model', body)).toEqual(first);
    expect(await api.counts()).toEqual(before);
    const changed = await client.raw('POST', '/api/v1/create_model', { ...body, lora_config: { rank: 8 } });
    expect(changed.status).toBe(400);
    expect(changed.body).toMatchObject({
      field: 'model_seq_id',
      error: expect.stringMatching(/different payload/),
    });
    expect(await api.counts()).toEqual(before);
  });

  it('a named checkpoint is write-once; its own retry is not a conflict', async () => {
    const modelId = await newModel();
    const save = { model_id: modelId, seq_id: 1, path: 'final' };
    const first = await client.raw('POST', '/api/v1/save_weights', save);
    expect(first.status).toBe(200);
    expect(await client.raw('POST', '/api/v1/save_weights', save)).toEqual(first);
    const before = await api.counts();
    const reuse = await client.raw('POST', '/api/v1/save_weights', { ...save, seq_id: 2 });
    expect(reuse).toEqual({
      status: 400,
      body: {
        error: `path: checkpoint name "final" is already used for model ${modelId} (names are write-once; save_weights with overwrite=true replaces it)`,
        field: 'path',
      },
    });
    expect(await api.counts()).toEqual(before);
    // The same name as a sampler checkpoint is a different namespace.
    expect(
      (await client.raw('POST', '/api/v1/save_weights_for_sampler', { ...save, seq_id: 3 })).status,
    ).toBe(200);
  });
});

describe('checkpoint names of saves that failed', () => {
  /** Ends a pending save as a fail step does (E2's attempt limit): future failed, name left reserved. */
  const failWithoutRunning = (requestId: string) =>
    failFuture(requestId, { message: 'failed after 3 attempts', category: 'server' }, api.cloud.clients);
  const reservationOf = (modelId: string, name: string) =>
    readCheckpointName(
      api.cloud.clients.doc,
      api.cloud.names.tables.registry,
      registryKey.checkpointName(modelId, 'weights', name),
    );
  const save = (modelId: string, seqId: number, path: string) =>
    client.raw('POST', '/api/v1/save_weights', { model_id: modelId, seq_id: seqId, path });
  const requestIdOf = (answer: { body: unknown }) => (answer.body as { request_id?: string }).request_id;
  const nameUsed = (modelId: string, name: string) => ({
    status: 400,
    body: {
      error: `path: checkpoint name "${name}" is already used for model ${modelId} (names are write-once; save_weights with overwrite=true replaces it)`,
      field: 'path',
    },
  });

  it('a save that failed without running leaves its name to the next save of it', async () => {
    const modelId = await newModel();
    const first = await save(modelId, 1, 'best');
    expect(first.status).toBe(200);
    // Still pending: the name is held.
    expect(await save(modelId, 2, 'best')).toEqual(nameUsed(modelId, 'best'));

    await failWithoutRunning(requestIdOf(first)!);
    expect(await reservationOf(modelId, 'best')).toMatchObject({
      request_id: requestIdOf(first),
      status: 'pending',
    });
    const again = await save(modelId, 3, 'best');
    expect(again.status).toBe(200);
    expect(await reservationOf(modelId, 'best')).toMatchObject({
      request_id: requestIdOf(again),
      status: 'pending',
    });
    // The new reservation holds the name as the first did.
    expect(await save(modelId, 4, 'best')).toEqual(nameUsed(modelId, 'best'));
  });

  it('several saves of a stale name at once: exactly one takes it', async () => {
    const modelId = await newModel();
    await failWithoutRunning(requestIdOf(await save(modelId, 1, 'x'))!);
    const answers = await Promise.all([2, 3, 4, 5].map((seq) => save(modelId, seq, 'x')));
    const taken = answers.filter((answer) => answer.status === 200);
    expect(taken).toHaveLength(1);
    expect(answers.filter((answer) => answer.status === 400)).toHaveLength(3);
    const winner = taken[0] === undefined ? undefined : requestIdOf(taken[0]);
    expect(winner).toEqual(expect.any(String));
    expect(await reservationOf(modelId, 'x')).toMatchObject({ request_id: winner });
  });
});

describe('concurrent duplicates', () => {
  const PARALLEL = 20;

  async function payloadObjects(): Promise<Set<string>> {
    const keys = new Set<string>();
    let token: string | undefined;
    do {
      const page = await api.cloud.clients.s3.send(
        new ListObjectsV2Command({
          Bucket: api.cloud.names.bucket,
          Prefix: 'payloads/',
          ContinuationToken: token,
        }),
      );
      for (const object of page.Contents ?? []) if (object.Key) keys.add(object.Key);
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
    return keys;
  }

  it(`${PARALLEL} identical forward_backward submits make one future and one row; no payload is left orphaned`, async () => {
    const modelId = await newModel();
    const answers = await Promise.all(
      range(1, PARALLEL).map(() => client.raw('POST', '/api/v1/forward_backward', fbBody(modelId, 1))),
    );
    expect(answers.every((answer) => answer.status === 200)).toBe(true);
    const ids = new Set(answers.map((answer) => (answer.body as { request_id: string }).request_id));
    expect(ids.size).toBe(1);
    const rows = await rowsOf(modelId);
    expect(rows.map((row) => row.request_type).sort()).toEqual(['create_model', 'forward_backward']);
    const objects = await payloadObjects();
    for (const row of rows) expect(objects.has(row.payload_key)).toBe(true);
  });

  it(`${PARALLEL} identical create_model submits make one model`, async () => {
    const body = {
      session_id: sessionId,
      model_seq_id: 7,
      base_model: 'reference/byte-lm',
      lora_config: { rank: 2 },
    };
    const before = await api.counts();
    const answers = await Promise.all(
      range(1, PARALLEL).map(() => client.raw('POST', '/api/v1/create_model', body)),
    );
    expect(new Set(answers.map((answer) => JSON.stringify(answer))).size).toBe(1);
    expect(answers[0]!.status).toBe(200);
    const after = await api.counts();
    // One model row; one future; counter + idempotency record; one payload object.
    expect(after.models - before.models).toBe(1);
    expect(after.futures - before.futures).toBe(1);
    expect(after.registry - before.registry).toBe(2);
    expect(after.objects - before.objects).toBe(1);
  });

  it(`${PARALLEL} identical samples and sampling sessions make one of each`, async () => {
    const body = { session_id: sessionId, sampling_session_seq_id: 3, base_model: 'reference/byte-lm' };
    let before = await api.counts();
    const sessions = await Promise.all(
      range(1, PARALLEL).map(() => client.raw('POST', '/api/v1/create_sampling_session', body)),
    );
    expect(new Set(sessions.map((answer) => JSON.stringify(answer))).size).toBe(1);
    let after = await api.counts();
    expect(after.registry - before.registry).toBe(2);
    const { sampling_session_id } = sessions[0]!.body as { sampling_session_id: string };
    before = after;
    const sample = {
      sampling_session_id,
      seq_id: 0,
      prompt: { chunks: [{ tokens: [1, 2] }] },
      sampling_params: { max_tokens: 4 },
    };
    const samples = await Promise.all(
      range(1, PARALLEL).map(() => client.raw('POST', '/api/v1/asample', sample)),
    );
    expect(new Set(samples.map((answer) => JSON.stringify(answer))).size).toBe(1);
    expect(samples[0]!.status).toBe(200);
    after = await api.counts();
    expect({ futures: after.futures - before.futures, objects: after.objects - before.objects }).toEqual({
      futures: 1,
      objects: 1,
    });
  });

  it('concurrent submits of seq_ids 1..20 (each twice) to one model: contiguous seqs in seq_id order', async () => {
    const modelId = await newModel();
    const submitted = range(1, 20).flatMap((seqId) => [seqId, seqId]);
    const answers = await Promise.all(
      submitted.map(async (seqId) => ({
        seqId,
        answer: await client.raw('POST', '/api/v1/forward_backward', fbBody(modelId, seqId)),
      })),
    );
    const bySeqId = new Map<number, { status: number; body: unknown }[]>();
    for (const { seqId, answer } of answers) bySeqId.set(seqId, [...(bySeqId.get(seqId) ?? []), answer]);
    const accepted: { seqId: number; requestId: string }[] = [];
    for (const [seqId, pair] of bySeqId) {
      // Both copies of a seq_id get the same answer: the same future, or both out of order.
      expect(pair[0]!.status).toBe(pair[1]!.status);
      if (pair[0]!.status === 200) expect(pair[0]!.body).toEqual(pair[1]!.body);
      if (pair[0]!.status === 200) {
        accepted.push({ seqId, requestId: (pair[0]!.body as { request_id: string }).request_id });
      } else {
        expect(pair[0]!.status).toBe(400);
        expect((pair[0]!.body as { error: string }).error).toMatch(/out of order/);
      }
    }
    expect(accepted.length).toBeGreaterThan(0);
    const rows = await rowsOf(modelId);
    const seqOf = new Map(rows.map((row) => [row.request_id, row.seq!]));
    expect(rows.map((row) => row.seq).sort((a, b) => a! - b!)).toEqual(range(1, accepted.length + 1));
    // Seqs follow seq_ids: a higher accepted seq_id always got a higher seq.
    const inSeqIdOrder = accepted
      .sort((a, b) => a.seqId - b.seqId)
      .map(({ requestId }) => seqOf.get(requestId));
    expect(inSeqIdOrder).toEqual(range(2, accepted.length + 1));
  });

  it('many models submitting in order at once each keep contiguous seqs', async () => {
    const models = await Promise.all(range(1, 6).map(() => newModel()));
    await Promise.all(
      models.map(async (modelId) => {
        for (const seqId of range(1, 8)) {
          const answer = await client.raw('POST', '/api/v1/forward_backward', fbBody(modelId, seqId));
          expect(answer.status).toBe(200);
        }
      }),
    );
    for (const modelId of models) expect(await seqsOf(modelId)).toEqual(range(1, 9));
  });
});
