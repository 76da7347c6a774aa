import { GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { config } from '../../shared/base/config.js';
import type { FutureRow } from '../../shared/domain/records.js';
import { segmentRowKeys } from '../../shared/repositories/prefix/pointer.js';
import { createPrefixStore, type PrefixStore } from '../../shared/repositories/prefix/store.js';
import type { PrefixPointer } from '../../shared/repositories/prefix/types.js';
import { cycle, expectBackToPending, startsOf, uninterrupted } from '../support/resume-harness.js';
import { BASE_MODEL, type TenantClient, WorkerHarness } from '../support/worker-harness.js';

/**
 * The edges of resumable sampling on the local cloud: a cut before any token restarts the call; a
 * cut right after a restore, or whose save fails, keeps the pointer the sample had; a corrupted prefix
 * row makes only its own sequence regenerate while the rest of the work item restores. Every answer
 * is still the uninterrupted one (the sampler is deterministic), and the client only ever sees
 * try_again before it.
 */

let h: WorkerHarness;
let t: TenantClient;
let session: string;

beforeAll(async () => {
  h = await WorkerHarness.start();
  t = h.tenant('cases');
  session = await t.samplingSession({ base_model: BASE_MODEL });
});

afterAll(() => h?.cloud.clients.dynamo.destroy());

const body = (numSamples: number, maxTokens: number, seed: number) => ({
  num_samples: numSamples,
  prompt: { chunks: [{ type: 'encoded_text' as const, tokens: [84, 104, 101] }] },
  sampling_params: { max_tokens: maxTokens, temperature: 1, seed },
});

const SLICE = { sampleSliceTokens: 2 };

/** The configured prefix store, recording the size of each saveCut and restoreMany it gets. */
function countingStore(): { store: PrefixStore; saves: number[]; restores: number[] } {
  const inner = createPrefixStore({ client: h.cloud.clients.doc });
  const saves: number[] = [];
  const restores: number[] = [];
  const store: PrefixStore = {
    saveCut: (rows, options) => {
      saves.push(rows.length);
      return inner.saveCut(rows, options);
    },
    restore: (request) => inner.restore(request),
    restoreMany: (requests) => {
      restores.push(requests.length);
      return inner.restoreMany(requests);
    },
  };
  return { store, saves, restores };
}

describe('resumable sampling edges', () => {
  it('a cut at zero generated tokens saves nothing and the call restarts', async () => {
    const request = body(2, 8, 11);
    const id = await t.sample(session, request);
    const cut = await cycle(h, [id], { cutAt: 0, worker: SLICE });
    expect(cut?.samples).toEqual([
      { request_id: id, outcome: 'cut', saved: 0, kept: 0, restart: 2, failed: 0 },
    ]);
    expect(cut?.events.some((event) => event.kind === 'sample-slice')).toBe(false);
    expect(await expectBackToPending(h, t.tenant, id)).toBeUndefined();

    const done = await cycle(h, [id], { worker: SLICE });
    expect(done?.samples[0]?.outcome).toBe('committed');
    expect(startsOf(done?.events ?? [], id)).toBeUndefined();
    expect(await h.answer(t.tenant, id)).toEqual(await uninterrupted(request));
  });

  it('a cut with nothing new since the restore, or whose save fails, keeps the pointer it had', async () => {
    const request = body(2, 12, 23);
    const id = await t.sample(session, request);
    await cycle(h, [id], { cutAt: 2, worker: SLICE });
    const first = await expectBackToPending(h, t.tenant, id);
    expect(first?.sequences).toHaveLength(2);

    // Cut again before a token is generated: the restored prefixes are the whole progress.
    const idle = await cycle(h, [id], { cutAt: 0, worker: SLICE });
    expect(idle?.samples[0]).toMatchObject({ outcome: 'cut', saved: 0, kept: 2, restart: 0, failed: 0 });
    expect(startsOf(idle?.events ?? [], id)?.map((start) => start.from)).toEqual(['restored', 'restored']);
    const second = await expectBackToPending(h, t.tenant, id);
    expect(second?.sequences).toEqual(first?.sequences);
    expect(second?.cuts).toBe(2);

    // Cut after more tokens, but the save's deadline has passed: nothing is acknowledged.
    const late = await cycle(h, [id], {
      cutAt: 1,
      worker: { ...SLICE, cutDeadline: () => Date.now() - 1 },
    });
    expect(late?.samples[0]).toMatchObject({ outcome: 'cut', saved: 0, kept: 2, failed: 2 });
    expect((await expectBackToPending(h, t.tenant, id))?.sequences).toEqual(first?.sequences);

    const done = await cycle(h, [id], { worker: SLICE });
    expect(done?.samples[0]?.outcome).toBe('committed');
    expect(await h.answer(t.tenant, id)).toEqual(await uninterrupted(request));
  });

  it('a corrupted prefix row regenerates only its sequence; the rest of the work item restores', async () => {
    const requestA = body(2, 10, 31);
    const requestB = body(1, 9, 47);
    const a = await t.sample(session, requestA);
    const b = await t.sample(session, requestB);
    const cutStore = countingStore();
    const cut = await cycle(h, [a, b], {
      cutAt: { each: [a, b], slices: 2 },
      worker: { ...SLICE, prefixes: cutStore.store },
    });
    // The work item's three unfinished sequences went out in one saveCut (P1).
    expect(cutStore.saves).toEqual([3]);
    expect(cut?.samples.map((sample) => sample.outcome)).toEqual(['cut', 'cut']);
    expect(cut?.samples.map((sample) => 'saved' in sample && sample.saved)).toEqual([2, 1]);
    const refA = await expectBackToPending(h, t.tenant, a);
    await expectBackToPending(h, t.tenant, b);

    // Flip one byte of sequence 0's stored row: its digest no longer matches the commit record.
    const pointer = refA?.sequences[0] as PrefixPointer;
    const [rowKey] = segmentRowKeys(pointer.callId, pointer.segments[0] as PrefixPointer['segments'][number]);
    const table = config().table('prefixes');
    const { doc } = h.cloud.clients;
    const stored = (await doc.send(new GetCommand({ TableName: table, Key: { pk: rowKey } }))).Item;
    const data = Uint8Array.from(stored?.data as Uint8Array);
    data[data.length - 1] = (data[data.length - 1] as number) ^ 0xff;
    await doc.send(new PutCommand({ TableName: table, Item: { ...stored, data } }));

    const resumeStore = countingStore();
    const done = await cycle(h, [a, b], { worker: { ...SLICE, prefixes: resumeStore.store } });
    expect(done?.samples.map((sample) => sample.outcome)).toEqual(['committed', 'committed']);
    // Both samples' restores were read at once (P4).
    expect(resumeStore.restores).toEqual([3]);
    const startsA = startsOf(done?.events ?? [], a);
    expect(startsA?.[0]).toMatchObject({ from: 'regenerate', reason: expect.stringMatching(/^corrupt/) });
    expect(startsA?.[1]).toMatchObject({ from: 'restored', tokens: expect.any(Number) });
    expect(startsOf(done?.events ?? [], b)).toEqual([{ from: 'restored', tokens: expect.any(Number) }]);

    expect(await h.answer(t.tenant, a)).toEqual(await uninterrupted(requestA));
    expect(await h.answer(t.tenant, b)).toEqual(await uninterrupted(requestB));
    const finished = (await h.future(a)) as FutureRow;
    expect(finished.status).toBe('completed');
    expect(finished.live).toBeUndefined();
  });
});
