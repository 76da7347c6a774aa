import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AwsClients } from '../../shared/aws/clients.js';
import type { Backend } from '../../shared/backend/backend.js';
import { manifestFor, manifestOf } from '../../shared/domain/planning/work-item.js';
import type { ModelRow } from '../../shared/domain/records.js';
import { runWorkItem, type WorkerOptions } from '../../shared/services/worker/index.js';
import { StateCache } from '../../shared/services/worker/state-cache.js';
import { type CallLog, loggedClients } from '../support/call-log.js';
import { BASE_MODEL, crossEntropy, textDatum, WorkerHarness } from '../support/worker-harness.js';

/**
 * What one work item costs the worker, call by call (issue #16: on a CPU-bound stack its latency is
 * its number of calls and of round trips in sequence). A change that adds a call fails here. Every
 * answer is also checked against the sequential oracle (R1), so a call saved never changes a result.
 */

let h: WorkerHarness;
let log: CallLog;
let clients: AwsClients;

beforeAll(async () => {
  h = await WorkerHarness.start();
  ({ clients, log } = loggedClients(h.cloud.endpoints, h.cloud.prefix));
});

afterAll(() => {
  h?.cloud.clients.dynamo.destroy();
  clients?.dynamo.destroy();
});

/** Dispatches the next work item of these models (or base-model pools) and runs it with logged calls. */
async function runNext(
  modelIds: readonly string[],
  options: Partial<WorkerOptions> & { bare?: boolean } = {},
) {
  const { bare, ...worker } = options;
  const dispatched = await h.dispatch({ only: (row) => modelIds.includes(row.model_id) });
  if (dispatched === undefined) throw new Error('nothing dispatched');
  log.reset();
  // The manifest the scheduler sends: it names the parts, so their rows are read beside the item's GET.
  const manifest = bare ? manifestFor(dispatched.item.work_item_id) : manifestOf(dispatched.item);
  const outcome = await runWorkItem(manifest, {
    backend: h.backend,
    clients,
    cutPollMs: 0,
    ...worker,
  });
  const commits = (call: string) => call.startsWith('UpdateItem') || call.startsWith('TransactWriteItems');
  return {
    item: dispatched.item,
    outcome,
    calls: [...log.calls].sort(),
    depth: log.depth(),
    /** The round trips before any commit: the work item's GET and the opening reads. */
    readDepth: log.depth((call) => !commits(call)),
  };
}

const sorted = (calls: string[]) => [...calls].sort();

/** The backend, with each sample answered only once `count` samples have been generated (a barrier). */
function samplesFinishingTogether(backend: Backend, count: number): Backend {
  let generated = 0;
  let releaseAll = () => {};
  const allGenerated = new Promise<void>((resolve) => {
    releaseAll = resolve;
  });
  return Object.assign(Object.create(backend) as Backend, {
    sample: async (...args: Parameters<Backend['sample']>) => {
      const run = await backend.sample(...args);
      if (++generated === count) releaseAll();
      await allGenerated;
      return run;
    },
  });
}

describe('the calls of one work item', () => {
  it('training (forward_backward + optim_step) on a state this process committed: 4 calls, 3 in sequence', async () => {
    const t = h.tenant('calls-train');
    const m = await t.createModel(4, 3);
    const states = new StateCache();
    const created = await runNext([m.model_id], { states });
    expect(created.calls).toEqual(
      sorted([
        'GetObject work',
        'BatchGetItem models',
        'PutObject state',
        'TransactWriteItems Update:models+Update:futures',
      ]),
    );
    expect(states.size).toBe(1);

    await t.pass('forward_backward', m.model_id, crossEntropy(textDatum('hello world')));
    await t.optimStep(m.model_id);
    const step = await runNext([m.model_id], { states });
    expect(step.outcome.models.map((part) => part.outcome)).toEqual(['committed']);
    expect(step.calls).toEqual(
      sorted([
        'GetObject work', // the work item
        'BatchGetItem models', // its model rows, strongly, beside it: still in flight? (E1)
        // no GetObject of the base state: this process committed it
        'PutObject state', // the new state under its fenced key (E3)
        'TransactWriteItems Update:models+Update:futures+Update:futures', // the commit (E4)
      ]),
    );
    expect(step.depth).toBe(3);
    // The superseded state is dropped: one entry per model.
    expect(states.size).toBe(1);
    await expectOracle();
  });

  it('training on a state another process committed: the base state is read once the item names it (5 calls, 4 in sequence)', async () => {
    const t = h.tenant('calls-miss');
    const m = await t.createModel(4, 5);
    await runNext([m.model_id], { states: new StateCache() });
    await t.pass('forward_backward', m.model_id, crossEntropy(textDatum('elsewhere')));
    const step = await runNext([m.model_id], { states: new StateCache() });
    expect(step.calls).toEqual(
      sorted([
        'GetObject work',
        'BatchGetItem models',
        'GetObject state',
        'PutObject state',
        'TransactWriteItems Update:models+Update:futures',
      ]),
    );
    expect(step.depth).toBe(4);
    await expectOracle();
  });

  it('three models in one work item read their rows in one call, and commit one transaction each (E4)', async () => {
    const t = h.tenant('calls-three');
    const states = new StateCache();
    const models = [await t.createModel(2, 1), await t.createModel(2, 2), await t.createModel(2, 3)];
    const ids = models.map((model) => model.model_id);
    const created = await runNext(ids, { states });
    expect(created.item.models).toHaveLength(3);
    for (const model of models) {
      await t.pass('forward_backward', model.model_id, crossEntropy(textDatum(`model ${model.model_id}`)));
    }
    const step = await runNext(ids, { states });
    expect(step.item.models).toHaveLength(3);
    expect(step.outcome.models.map((part) => part.outcome)).toEqual(['committed', 'committed', 'committed']);
    expect(step.calls).toEqual(
      sorted([
        'GetObject work',
        'BatchGetItem models',
        ...ids.flatMap(() => ['PutObject state', 'TransactWriteItems Update:models+Update:futures']),
      ]),
    );
    expect(step.depth).toBe(3);
    await expectOracle();
  });

  it('two base-model samples: their claims and prefix pointers read beside the item, one commit for both (R4)', async () => {
    const t = h.tenant('calls-sample');
    const session = await t.samplingSession({ base_model: BASE_MODEL });
    for (const seed of [4, 5]) {
      await t.sample(session, {
        num_samples: 1,
        prompt: { chunks: [{ type: 'encoded_text', tokens: [72, 105] }] },
        sampling_params: { max_tokens: 4, temperature: 0.8, seed },
      });
    }
    // The two samples finish generating together, as a batching engine finishes them.
    const run = await runNext([`base:${BASE_MODEL}`], { backend: samplesFinishingTogether(h.backend, 2) });
    expect(run.outcome.samples.map((part) => part.outcome)).toEqual(['committed', 'committed']);
    expect(run.calls).toEqual(
      sorted([
        'GetObject work',
        'BatchGetItem futures', // where each sample resumes (prefix pointers, P4)
        'BatchGetItem registry', // both claims, strongly: still this work item's?
        // Samples that end together take their session log's next two positions with one ADD, then
        // end both futures, delete both claims and write both log entries in one transaction (W9).
        'UpdateItem registry',
        'TransactWriteItems Update:futures+Delete:registry+Put:registry+Update:futures+Delete:registry+Put:registry',
      ]),
    );
    // The claims and prefix pointers are read beside the work item's GET: one round trip; then the
    // positions, then the commit.
    expect(run.readDepth).toBe(1);
    expect(run.depth).toBe(3);
    await expectOracle();
  });

  it('a manifest that names no parts (as before they were named) costs the same calls, one round trip more', async () => {
    const t = h.tenant('calls-bare');
    const m = await t.createModel(4, 6);
    const states = new StateCache();
    await runNext([m.model_id], { states });
    await t.pass('forward_backward', m.model_id, crossEntropy(textDatum('bare manifest')));
    const step = await runNext([m.model_id], { states, bare: true });
    expect(step.calls).toEqual(
      sorted([
        'GetObject work',
        'BatchGetItem models',
        'PutObject state',
        'TransactWriteItems Update:models+Update:futures',
      ]),
    );
    expect(step.depth).toBe(4);
    await expectOracle();
  });

  it('a redelivery after the commit stops at the row read: nothing runs or is written', async () => {
    const t = h.tenant('calls-redeliver');
    const m = await t.createModel(2, 7);
    const states = new StateCache();
    await runNext([m.model_id], { states });
    await t.pass('forward_backward', m.model_id, crossEntropy(textDatum('twice')));
    const dispatched = await h.dispatch({ only: (row) => row.model_id === m.model_id });
    await runWorkItem(dispatched!.manifest, { backend: h.backend, clients, cutPollMs: 0, states });
    const before = (await h.modelRow(m.model_id)) as ModelRow;
    log.reset();
    const again = await runWorkItem(dispatched!.manifest, {
      backend: h.backend,
      clients,
      cutPollMs: 0,
      states,
    });
    expect(again.models.map((part) => part.outcome)).toEqual(['not_inflight']);
    // Its base state was fetched beside the row (the superseded state is no longer kept): nothing else.
    expect(sorted(log.calls)).toEqual(['BatchGetItem models', 'GetObject state', 'GetObject work']);
    expect(await h.modelRow(m.model_id)).toEqual(before);
  });
});

async function expectOracle(): Promise<void> {
  const [expected, actual] = [await h.oracle(), await h.answers()];
  for (const [id, answer] of expected) expect(actual.get(id), id).toEqual(answer);
}
