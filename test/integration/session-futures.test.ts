import { GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { transactWrite } from '../../shared/aws/transact.js';
import { type TinkerClient, TinkerHttpError } from '../../shared/client/tinker-client.js';
import { registryKey } from '../../shared/domain/records.js';
import { CLONE_SEQ_SPAN, sessionLogKey } from '../../shared/domain/session-log.js';
import { CANCELLED } from '../../shared/repositories/samples/cancel.js';
import {
  logEntryItem,
  readLogAfter,
  readLogEntry,
  takeLogPosition,
  voidLogPosition,
} from '../../shared/repositories/session-log.js';
import type { RetrieveFuturesAnswer } from '../../shared/services/api/session-futures.js';
import { commitSample } from '../../shared/services/worker/commit.js';
import { type ApiHarness, startApiHarness } from '../support/api-harness.js';

/**
 * Session futures (W9) over HTTP, request by request as SDK releases after 0.25.0 send them: the
 * client/config flags by SDK version, one long poll per (sampling session, clone) answering samples as
 * they commit, a cursor that loses nothing across polls and reconnects, clones' ids, cancel_future,
 * the session's finish and its heartbeat's 410. Two stacks: the api alone (futures stay queued, so
 * cancels and log gaps are the test's), and api, scheduler and worker (samples run and commit) with
 * the commit signal off, so polls re-read as they do on AWS.
 */

const BASE = 'reference/byte-lm';
const prompt = { chunks: [{ type: 'encoded_text' as const, tokens: [72, 105, 33] }] };
const datum = {
  model_input: { chunks: [{ type: 'encoded_text', tokens: [72, 105] }] },
  loss_fn_inputs: { target_tokens: { data: [105, 33], dtype: 'int64' as const, shape: [2] } },
};

async function samplingSession(client: TinkerClient): Promise<{ session: string; sampler: string }> {
  const { session_id } = await client.createSession({ sdk_version: '0.32.0' });
  const { sampling_session_id } = await client.createSamplingSession({
    session_id,
    sampling_session_seq_id: 0,
    base_model: BASE,
  });
  return { session: session_id, sampler: sampling_session_id };
}

function sample(client: TinkerClient, sampler: string, seqId: number, maxTokens = 4) {
  return client.asample({
    sampling_session_id: sampler,
    seq_id: seqId,
    num_samples: 1,
    prompt,
    sampling_params: { max_tokens: maxTokens, seed: seqId },
  });
}

/** Polls from `cursor` (as the SDK's poller does) until `wanted` request ids have been answered. */
async function pollUntil(
  client: TinkerClient,
  target: { sampling_session_id: string; cloned_sampler_id?: number },
  cursor: number,
  wanted: number,
): Promise<{ seen: RetrieveFuturesAnswer['completions'][number][]; cursor: number; polls: number }> {
  const seen: RetrieveFuturesAnswer['completions'][number][] = [];
  let polls = 0;
  while (seen.length < wanted) {
    if (++polls > 200) throw new Error(`only ${seen.length} of ${wanted} completions after 200 polls`);
    const answer = await client.retrieveFutures({
      target: { type: 'sampling_session', ...target },
      prev_cursor: cursor,
    });
    expect(answer.cursor).toBeGreaterThanOrEqual(cursor);
    seen.push(...answer.completions);
    cursor = answer.cursor;
  }
  return { seen, cursor, polls };
}

describe('session futures with samples that run (api, scheduler, worker; no commit signal)', () => {
  let api: ApiHarness;
  let client: TinkerClient;

  beforeAll(async () => {
    api = await startApiHarness(
      { LONG_POLL_SECONDS: '2' },
      { functions: ['api', 'scheduler', 'worker'], wakeUps: false },
    );
    ({ client } = await api.tenant('acme'));
  });
  afterAll(async () => {
    await api?.stop();
  });

  it('client/config advertises session futures to releases after 0.25 only; cancels to all', async () => {
    for (const old of ['0.24.1', '0.25.0', undefined]) {
      const answer = await client.clientConfig(old === undefined ? {} : { sdk_version: old });
      expect(answer).not.toHaveProperty('sample_use_retrieve_futures');
      expect(answer).not.toHaveProperty('sample_join_sampling_session');
    }
    for (const newer of ['0.26.0', '0.30.1', '0.32.0', '1.0.0rc1']) {
      expect(await client.clientConfig({ sdk_version: newer })).toMatchObject({
        sample_use_retrieve_futures: true,
        sample_join_sampling_session: true,
      });
    }
    expect(await client.dynamicConfig()).toMatchObject({ sample_cancel_enabled: true });
  });

  it('one poll answers every sample of the session once, each still readable through retrieve_future', async () => {
    const { sampler } = await samplingSession(client);
    const ids = await Promise.all(Array.from({ length: 6 }, (_, n) => sample(client, sampler, n + 1)));
    const { seen, cursor } = await pollUntil(client, { sampling_session_id: sampler }, 0, ids.length);
    expect(seen.map((entry) => entry.request_id).sort()).toEqual(ids.map((id) => id.request_id).sort());
    expect(seen.every((entry) => entry.state === 'finished')).toBe(true);
    expect(cursor).toBe(ids.length);
    for (const { request_id } of ids) {
      const result = (await client.retrieveFuture(request_id)) as { sequences?: unknown[] };
      expect(result.sequences).toHaveLength(1);
    }
    // A reconnect with an older cursor (an answer lost to a timeout) gets the same completions again.
    const again = await client.retrieveFutures({
      target: { sampling_session_id: sampler },
      prev_cursor: 2,
    });
    expect(again.completions.map((entry) => entry.request_id)).toEqual(
      seen.slice(2).map((e) => e.request_id),
    );
    expect(again.cursor).toBe(ids.length);
    // Nothing new: the poll holds to its deadline and answers nothing, at the same cursor.
    expect(
      await client.retrieveFutures({ target: { sampling_session_id: sampler }, prev_cursor: cursor }),
    ).toEqual({
      completions: [],
      cursor,
    });
  });

  it('a clone gets its own id and its own poll; request ids of clones never collide', async () => {
    const { sampler } = await samplingSession(client);
    const first = await client.joinSamplingSession(sampler);
    const second = await client.joinSamplingSession(sampler);
    expect(first.client_counter).toBe(1);
    expect(second.client_counter).toBe(2);
    const original = await sample(client, sampler, 1);
    const cloned = await sample(client, sampler, CLONE_SEQ_SPAN * first.client_counter + 1);
    expect(cloned.request_id).not.toBe(original.request_id);
    const clonePoll = await pollUntil(
      client,
      { sampling_session_id: sampler, cloned_sampler_id: first.client_counter },
      0,
      1,
    );
    expect(clonePoll.seen.map((entry) => entry.request_id)).toEqual([cloned.request_id]);
    const originalPoll = await pollUntil(client, { sampling_session_id: sampler }, 0, 1);
    expect(originalPoll.seen.map((entry) => entry.request_id)).toEqual([original.request_id]);
  });
});

describe('session futures with queued samples (api only)', () => {
  let api: ApiHarness;
  let client: TinkerClient;
  let other: TinkerClient;

  beforeAll(async () => {
    api = await startApiHarness({ LONG_POLL_SECONDS: '8', POLL_SLOT_AFTER_MS: '0' });
    api.cloud.applyEnv();
    ({ client } = await api.tenant('acme'));
    ({ client: other } = await api.tenant('zeta'));
  });
  afterAll(async () => {
    await api?.stop();
  });

  it('cancel_future drops a queued sample: it fails, and the session poll answers it failed', async () => {
    const { sampler } = await samplingSession(client);
    const queued = await sample(client, sampler, 1);
    expect(await client.cancelFuture(queued.request_id)).toMatchObject({ cancelled: true });
    expect(await client.retrieveFuture(queued.request_id)).toMatchObject({ category: 'user' });
    const poll = await client.retrieveFutures({ target: { sampling_session_id: sampler }, prev_cursor: 0 });
    expect(poll).toEqual({
      completions: [
        { state: 'failed', request_id: queued.request_id, response_payload_uncompressed_size: null },
      ],
      cursor: 1,
    });
    // Ended already: a second cancel changes nothing.
    expect(await client.cancelFuture(queued.request_id)).toMatchObject({ cancelled: false });
  });

  it('cancel_future marks a running sample (its claim is held): only its cancelled commit lands', async () => {
    const { sampler } = await samplingSession(client);
    const running = await sample(client, sampler, 1);
    const { doc } = api.cloud.clients;
    const tables = { futures: api.cloud.names.tables.futures, registry: api.cloud.names.tables.registry };
    await doc.send(
      new PutCommand({
        TableName: tables.registry,
        Item: {
          pk: registryKey.sampleClaim(running.request_id),
          request_id: running.request_id,
          claim_token: 'w1',
          work_item_id: 'w1',
          lease_until: Date.now() + 60_000,
          ttl: Math.floor(Date.now() / 1000) + 3600,
        },
      }),
    );
    expect(await client.cancelFuture(running.request_id)).toMatchObject({ cancelled: true });
    // The drop it tried first (refused: the claim is held) left no position unfilled.
    const logKey = sessionLogKey(sampler, 0);
    expect(await readLogEntry(doc, tables.registry, logKey, 1)).toEqual({ position: 1, state: 'void' });
    // Its worker has not seen the mark yet: the future runs on.
    expect(await client.retrieveFuture(running.request_id)).toMatchObject({ type: 'try_again' });
    const store = { doc, tables: { ...tables, models: api.cloud.names.tables.models } };
    const log = { logKey: sessionLogKey(sampler, 0), tenant: 'acme' };
    const completed = { status: 'completed' as const, result: { sequences: [] } };
    // A result that finishes after the cancel does not land ...
    expect(
      await commitSample(running.request_id, 'w1', 'r1', completed, Date.now(), store, undefined, log),
    ).toEqual({ committed: false, cancelRequested: true });
    // (its position voided too) ...
    expect(await readLogEntry(doc, tables.registry, logKey, 2)).toEqual({ position: 2, state: 'void' });
    // ... the cancelled end does, once.
    const cancelled = { status: 'failed' as const, error: CANCELLED };
    expect(
      await commitSample(running.request_id, 'w1', 'r1', cancelled, Date.now(), store, undefined, log, true),
    ).toMatchObject({ committed: true });
    expect(await client.retrieveFuture(running.request_id)).toMatchObject({ category: 'user' });
    // The session's poll answers it at once: no position before it waits to be voided.
    const started = Date.now();
    const poll = await client.retrieveFutures({ target: { sampling_session_id: sampler }, prev_cursor: 0 });
    expect(poll.completions.map((entry) => [entry.state, entry.request_id])).toEqual([
      ['failed', running.request_id],
    ]);
    expect(poll.cursor).toBe(3);
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(await client.cancelFuture(running.request_id)).toMatchObject({ cancelled: false });
  });

  it('a commit that lands late is answered in order: the poll waits at its position, never skips it', async () => {
    const { sampler } = await samplingSession(client);
    const late = await sample(client, sampler, 1);
    const next = await sample(client, sampler, 2);
    const { doc } = api.cloud.clients;
    const registry = api.cloud.names.tables.registry;
    const log = sessionLogKey(sampler, 0);
    // A commit took position 1 and has not written its entry yet; the cancel takes position 2.
    const latePosition = await takeLogPosition(doc, registry, log, Date.now());
    expect(latePosition).toBe(1);
    expect(await client.cancelFuture(next.request_id)).toMatchObject({ cancelled: true });
    const poll = client.retrieveFutures({ target: { sampling_session_id: sampler }, prev_cursor: 0 });
    await new Promise((resolve) => setTimeout(resolve, 150));
    const landed = await transactWrite(
      [
        logEntryItem(registry, {
          logKey: log,
          position: latePosition,
          requestId: late.request_id,
          state: 'finished',
          tenant: 'acme',
          now: Date.now(),
        }),
      ],
      'late-commit',
      doc,
    );
    expect(landed.ok).toBe(true);
    const answer = await poll;
    expect(answer.completions.map((entry) => entry.request_id)).toEqual([late.request_id, next.request_id]);
    expect(answer.cursor).toBe(2);
  });

  it('a position whose commit never lands is voided, and what follows it is answered', async () => {
    const { sampler } = await samplingSession(client);
    const after = await sample(client, sampler, 1);
    const { doc } = api.cloud.clients;
    const registry = api.cloud.names.tables.registry;
    const log = sessionLogKey(sampler, 0);
    const lost = await takeLogPosition(doc, registry, log, Date.now());
    expect(await client.cancelFuture(after.request_id)).toMatchObject({ cancelled: true });
    const answer = await client.retrieveFutures({ target: { sampling_session_id: sampler }, prev_cursor: 0 });
    expect(answer).toMatchObject({ completions: [{ request_id: after.request_id }], cursor: lost + 1 });
    // The commit that took the voided position now fails its entry's condition (it takes a new one).
    const tooLate = await transactWrite(
      [
        logEntryItem(registry, {
          logKey: log,
          position: lost,
          requestId: 'f'.repeat(32),
          state: 'finished',
          tenant: 'acme',
          now: Date.now(),
        }),
      ],
      'too-late-commit',
      doc,
    );
    expect(tooLate).toMatchObject({ ok: false, conditionFailed: true });
  });

  it('a commit whose position was voided takes the next one: the sample is logged once, after the void', async () => {
    const { sampler } = await samplingSession(client);
    const queued = await sample(client, sampler, 1);
    const { doc } = api.cloud.clients;
    const tables = {
      futures: api.cloud.names.tables.futures,
      models: api.cloud.names.tables.models,
      registry: api.cloud.names.tables.registry,
    };
    const log = sessionLogKey(sampler, 0);
    // A poll voided position 1 before this commit took it (its counter still stands at 0).
    expect(await voidLogPosition(doc, tables.registry, log, 1, Date.now())).toBe(true);
    await doc.send(
      new PutCommand({
        TableName: tables.registry,
        Item: {
          pk: registryKey.sampleClaim(queued.request_id),
          request_id: queued.request_id,
          claim_token: 'w2',
          work_item_id: 'w2',
          lease_until: Date.now() + 60_000,
          ttl: Math.floor(Date.now() / 1000) + 3600,
        },
      }),
    );
    const committed = await commitSample(
      queued.request_id,
      'w2',
      'run-w2',
      { status: 'completed', result: JSON.stringify({ sequences: [] }) },
      Date.now(),
      { doc, tables },
      undefined,
      { logKey: log, tenant: 'acme' },
    );
    expect(committed).toEqual({ committed: true, settledByReread: false });
    expect(await readLogAfter(doc, tables.registry, log, 0, 10)).toEqual([
      { position: 1, state: 'void' },
      { position: 2, state: 'finished', request_id: queued.request_id },
    ]);
    expect(await client.retrieveFutures({ target: { sampling_session_id: sampler } })).toMatchObject({
      completions: [{ request_id: queued.request_id, state: 'finished' }],
      cursor: 2,
    });
  });

  it('another tenant’s session, future or sampler answers as an unknown one (C6)', async () => {
    const { sampler } = await samplingSession(client);
    const queued = await sample(client, sampler, 1);
    const refusals = [
      () => other.retrieveFutures({ target: { sampling_session_id: sampler }, prev_cursor: 0 }),
      () => other.joinSamplingSession(sampler),
      () => other.cancelFuture(queued.request_id),
    ];
    for (const refusal of refusals) {
      const error = await refusal().catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(TinkerHttpError);
      expect((error as TinkerHttpError).status).toBe(404);
    }
    const unknown = await other
      .retrieveFutures({ target: { sampling_session_id: 'sampling-nope' } })
      .catch((e: unknown) => e);
    expect((unknown as TinkerHttpError).status).toBe(404);
    expect(await client.retrieveFuture(queued.request_id)).toMatchObject({ type: 'try_again' });
  });

  it('a finished session refuses new steps, samples and samplers (410, nothing stored), answers retries, lets its models unload (W9)', async () => {
    const { session_id } = await client.createSession({ sdk_version: '0.32.0' });
    const { model_id } = await client.createModel({
      session_id,
      model_seq_id: 0,
      base_model: BASE,
      lora_config: { rank: 4 },
    });
    const pass = {
      model_id,
      seq_id: 1,
      forward_backward_input: { data: [datum], loss_fn: 'cross_entropy' as const },
    };
    const accepted = await client.forwardBackward(pass);
    const { sampling_session_id } = await client.createSamplingSession({
      session_id,
      sampling_session_seq_id: 0,
      base_model: BASE,
    });
    await client.finishSession(session_id, { reason: { type: 'success' } });

    const refusals = [
      await client.optimStep({ model_id, seq_id: 2, adam_params: {} }).catch((error: unknown) => error),
      await sample(client, sampling_session_id, 1).catch((error: unknown) => error),
      await client
        .createSamplingSession({ session_id, sampling_session_seq_id: 1, base_model: BASE })
        .catch((error: unknown) => error),
    ];
    for (const refusal of refusals) {
      expect(refusal).toBeInstanceOf(TinkerHttpError);
      expect((refusal as TinkerHttpError).status).toBe(410);
      expect(JSON.stringify((refusal as TinkerHttpError).body)).toContain(
        `session ${session_id} has finished`,
      );
    }
    // Nothing of the refused step was stored: its model's counter still ends at the accepted pass.
    const counter = await api.cloud.clients.doc.send(
      new GetCommand({
        TableName: api.cloud.names.tables.registry,
        Key: { pk: registryKey.seqCounter(model_id) },
        ConsistentRead: true,
      }),
    );
    expect(counter.Item).toMatchObject({ seq: 2, last_seq_id: 1 });
    // A retry of what the session accepted before it finished answers the original future.
    expect((await client.forwardBackward(pass)).request_id).toBe(accepted.request_id);
    // Its models can still be unloaded (the SDK's clean-up after close).
    expect((await client.unloadModel(model_id)).request_id).toEqual(expect.any(String));
  });

  it('a finished session stays readable and answers exact resends of create_model and create_sampling_session accepted before (W9)', async () => {
    const { session_id } = await client.createSession({ sdk_version: '0.32.0' });
    const create = { session_id, model_seq_id: 0, base_model: BASE, lora_config: { rank: 4 } };
    const created = await client.createModel(create);
    const sampler = { session_id, sampling_session_seq_id: 0, base_model: BASE };
    const opened = await client.createSamplingSession(sampler);
    await client.finishSession(session_id, { reason: { type: 'success' } });

    // Reading stays allowed, as the listing of sessions does.
    const read = await client.raw('GET', `/api/v1/sessions/${session_id}`);
    expect(read).toMatchObject({
      status: 200,
      body: { training_run_ids: [created.model_id], sampler_ids: [opened.sampling_session_id] },
    });
    const before = await api.counts();
    expect(await client.createModel(create)).toEqual(created);
    expect(await client.createSamplingSession(sampler)).toMatchObject({
      sampling_session_id: opened.sampling_session_id,
    });
    // A new key, or the same key with another body, is still refused: 410 and 400 (R7).
    const refusals = [
      await client.createModel({ ...create, model_seq_id: 1 }).catch((error: unknown) => error),
      await client
        .createSamplingSession({ ...sampler, sampling_session_seq_id: 1 })
        .catch((error: unknown) => error),
      await client.createModel({ ...create, lora_config: { rank: 8 } }).catch((error: unknown) => error),
    ];
    expect(refusals.map((refusal) => (refusal as TinkerHttpError).status)).toEqual([410, 410, 400]);
    expect(await api.counts()).toEqual(before);
  });

  it('a finished session answers its heartbeat 410 and takes no new models; the first reason wins', async () => {
    const { session_id } = await client.createSession({ sdk_version: '0.32.0' });
    await client.heartbeat(session_id);
    await client.finishSession(session_id, { reason: { type: 'success' }, detail: null });
    await client.finishSession(session_id, { reason: { type: 'errored' }, detail: 'later' });
    const heartbeat = await client.heartbeat(session_id).catch((error: unknown) => error);
    expect((heartbeat as TinkerHttpError).status).toBe(410);
    const created = await client
      .createModel({ session_id, model_seq_id: 0, base_model: BASE, lora_config: { rank: 4 } })
      .catch((error: unknown) => error);
    expect((created as TinkerHttpError).status).toBe(410);
    const record = await api.cloud.clients.doc.send(
      new GetCommand({
        TableName: api.cloud.names.tables.registry,
        Key: { pk: registryKey.session(session_id) },
        ConsistentRead: true,
      }),
    );
    expect(record.Item).toMatchObject({ finish_reason: 'success' });
    expect(record.Item).not.toHaveProperty('finish_detail');
    // Another tenant's session is unknown to this one.
    const foreign = await other
      .finishSession(session_id, { reason: { type: 'interrupted' } })
      .catch((error: unknown) => error);
    expect((foreign as TinkerHttpError).status).toBe(404);
  });
});
