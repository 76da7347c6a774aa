import { GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localAwsClients } from '../../local/cloud/aws-clients.js';
import type { AwsClients } from '../../shared/aws/clients.js';
import type { TinkerClient } from '../../shared/client/tinker-client.js';
import { registryKey } from '../../shared/domain/records.js';
import { sessionLogKey } from '../../shared/domain/session-log.js';
import { readLogAfter } from '../../shared/repositories/session-log.js';
import {
  type CommitStore,
  commitSamples,
  type SampleCommitRequest,
} from '../../shared/services/worker/commit.js';
import { type ApiHarness, startApiHarness } from '../support/api-harness.js';
import { type CallLog, loggedClients } from '../support/call-log.js';
import { createFaultInjector, type FaultInjector } from '../support/faults.js';

/**
 * Samples that end together commit in shared transactions (`commitSamples`), and each sample's answer
 * is still exactly its own commit's (R4, W9, E5): the group lands whole or not at all; a group that does
 * not land commits each sample on its own at the log position the group took for it (no hole in the
 * session's log); a group that landed but whose answer was lost is settled as landed.
 */

const BASE = 'reference/byte-lm';
const prompt = { chunks: [{ type: 'encoded_text' as const, tokens: [72, 105, 33] }] };

let api: ApiHarness;
let client: TinkerClient;
let store: CommitStore;
let logged: { clients: AwsClients; log: CallLog };
let faulty: AwsClients;
let faults: FaultInjector;
let detach: () => void;

beforeAll(async () => {
  // The api alone: futures stay queued, and the test plays the worker.
  api = await startApiHarness();
  client = (await api.tenant('acme')).client;
  const { names } = api.cloud;
  const tables = {
    futures: names.tables.futures,
    models: names.tables.models,
    registry: names.tables.registry,
  };
  store = { doc: api.cloud.clients.doc, tables };
  logged = loggedClients(api.cloud.endpoints, api.cloud.prefix);
  faulty = localAwsClients(api.cloud.endpoints);
  faults = createFaultInjector({ seed: 3 });
  detach = faults.attach(faulty);
});

afterAll(async () => {
  detach?.();
  for (const c of [logged?.clients.dynamo, faulty?.dynamo, faulty?.s3, faulty?.sqs]) c?.destroy();
  await api?.stop();
});

/** `count` queued samples of a new sampling session, each claimed by work item `token`. */
async function claimedSamples(count: number, token: string) {
  const { session_id } = await client.createSession({ sdk_version: '0.32.0' });
  const { sampling_session_id: sampler } = await client.createSamplingSession({
    session_id,
    sampling_session_seq_id: 0,
    base_model: BASE,
  });
  const ids: string[] = [];
  for (let seq = 1; seq <= count; seq++) {
    const { request_id } = await client.asample({
      sampling_session_id: sampler,
      seq_id: seq,
      num_samples: 1,
      prompt,
      sampling_params: { max_tokens: 4, seed: seq },
    });
    await store.doc.send(
      new PutCommand({
        TableName: store.tables.registry,
        Item: {
          pk: registryKey.sampleClaim(request_id),
          request_id,
          claim_token: token,
          work_item_id: token,
          lease_until: Date.now() + 60_000,
          ttl: Math.floor(Date.now() / 1000) + 3600,
        },
      }),
    );
    ids.push(request_id);
  }
  const logKey = sessionLogKey(sampler, 0);
  const requests: SampleCommitRequest[] = ids.map((requestId, index) => ({
    requestId,
    claimToken: token,
    run: `run-${token}`,
    outcome: { status: 'completed', result: JSON.stringify({ sequences: [{ tokens: [index] }] }) },
    now: Date.now(),
    log: { logKey, tenant: 'acme' },
  }));
  return { ids, logKey, requests };
}

const futureRow = async (requestId: string) =>
  (
    await store.doc.send(
      new GetCommand({
        TableName: store.tables.futures,
        Key: { request_id: requestId },
        ConsistentRead: true,
      }),
    )
  ).Item;

const claimOf = async (requestId: string) =>
  (
    await store.doc.send(
      new GetCommand({
        TableName: store.tables.registry,
        Key: { pk: registryKey.sampleClaim(requestId) },
        ConsistentRead: true,
      }),
    )
  ).Item;

describe('sample commits in shared transactions', () => {
  it('samples that end together: one log position ADD and one transaction; each ends, claim gone, logged in order', async () => {
    const { ids, logKey, requests } = await claimedSamples(3, 'w-group');
    logged.log.reset();
    const answers = await commitSamples(requests, { ...store, doc: logged.clients.doc });
    expect(answers).toEqual(ids.map(() => ({ committed: true, settledByReread: false })));
    expect([...logged.log.calls].sort()).toEqual([
      'TransactWriteItems Update:futures+Delete:registry+Put:registry+Update:futures+Delete:registry+Put:registry+Update:futures+Delete:registry+Put:registry',
      'UpdateItem registry',
    ]);
    for (const id of ids) {
      expect(await futureRow(id)).toMatchObject({ status: 'completed', run: 'run-w-group' });
      expect(await claimOf(id)).toBeUndefined();
    }
    expect(await readLogAfter(store.doc, store.tables.registry, logKey, 0, 10)).toEqual(
      ids.map((request_id, index) => ({ position: index + 1, state: 'finished', request_id })),
    );
  });

  it('more samples than one transaction holds go in several, each within 100 actions', async () => {
    const { ids, requests } = await claimedSamples(35, 'w-many');
    logged.log.reset();
    const answers = await commitSamples(requests, { ...store, doc: logged.clients.doc });
    expect(answers.every((answer) => 'committed' in answer && answer.committed)).toBe(true);
    const transactions = logged.log.calls.filter((call) => call.startsWith('TransactWriteItems'));
    // 33 samples of 3 actions, then 2.
    expect(transactions.map((call) => call.split('+').length).sort((a, b) => a - b)).toEqual([6, 99]);
    for (const id of ids) expect(await futureRow(id)).toMatchObject({ status: 'completed' });
  });

  it('a group with a sample cancelled meanwhile changes nothing; the others then commit alone at the group positions', async () => {
    const { ids, logKey, requests } = await claimedSamples(3, 'w-cancel');
    const cancelled = ids[1] as string;
    expect(await client.cancelFuture(cancelled)).toMatchObject({ cancelled: true });
    const answers = await commitSamples(requests, store);
    expect(answers).toEqual([
      { committed: true, settledByReread: false },
      { committed: false, cancelRequested: true },
      { committed: true, settledByReread: false },
    ]);
    expect(await futureRow(cancelled)).toMatchObject({ status: 'pending' });
    expect(await claimOf(cancelled)).toMatchObject({ claim_token: 'w-cancel' });
    // The two that landed hold the group's first and third positions; the position cancel_future took
    // before the group (its drop was refused: the claim is held) and the cancelled sample's are voided,
    // so the poll's cursor moves past them without waiting for a poll to void them.
    const entries = await readLogAfter(store.doc, store.tables.registry, logKey, 0, 10);
    const first = entries[0]?.position ?? 0;
    expect(entries).toEqual([
      { position: first, state: 'void' },
      { position: first + 1, state: 'finished', request_id: ids[0] },
      { position: first + 2, state: 'void' },
      { position: first + 3, state: 'finished', request_id: ids[2] },
    ]);
  });

  it('a group that landed but whose answers were lost is settled as landed (E5), once', async () => {
    const { ids, logKey, requests } = await claimedSamples(2, 'w-lost');
    faults.set('timeoutAfterWrite', 1, 'TransactWriteItems');
    let answers: Awaited<ReturnType<typeof commitSamples>>;
    try {
      answers = await commitSamples(requests, { ...store, doc: faulty.doc }, async () => {});
    } finally {
      faults.set('timeoutAfterWrite', 0, 'TransactWriteItems');
    }
    expect(faults.counts.timeoutAfterWrite).toBeGreaterThan(0);
    expect(answers).toEqual(ids.map(() => ({ committed: true, settledByReread: true })));
    for (const id of ids)
      expect(await futureRow(id)).toMatchObject({ status: 'completed', run: 'run-w-lost' });
    expect(await readLogAfter(store.doc, store.tables.registry, logKey, 0, 10)).toEqual(
      ids.map((request_id, index) => ({ position: index + 1, state: 'finished', request_id })),
    );
  });

  it("a claim another work item holds: that sample is not committed, the group's others are", async () => {
    const { ids, requests } = await claimedSamples(2, 'w-mine');
    const [mine, theirs] = ids as [string, string];
    await store.doc.send(
      new PutCommand({
        TableName: store.tables.registry,
        Item: {
          pk: registryKey.sampleClaim(theirs),
          request_id: theirs,
          claim_token: 'w-other',
          work_item_id: 'w-other',
          lease_until: Date.now() + 60_000,
        },
      }),
    );
    expect(await commitSamples(requests, store)).toEqual([
      { committed: true, settledByReread: false },
      { committed: false },
    ]);
    expect(await futureRow(mine)).toMatchObject({ status: 'completed' });
    expect(await futureRow(theirs)).toMatchObject({ status: 'pending' });
  });
});
