import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type CommitSignal,
  InProcessCommitSignal,
  NO_COMMIT_SIGNAL,
} from '../../shared/base/commit-signal.js';
import { config } from '../../shared/base/config.js';
import { retrieveFuture } from '../../shared/services/api/retrieve.js';
import { runWorkItem } from '../../shared/services/worker/index.js';
import { loggedClients } from '../support/call-log.js';
import { crossEntropy, textDatum, WorkerHarness } from '../support/worker-harness.js';

let h: WorkerHarness;

beforeAll(async () => {
  h = await WorkerHarness.start();
});

afterAll(() => h?.cloud.clients.dynamo.destroy());

/**
 * The signal as the local runtime installs it, but with retrieve_future's timed re-reads pushed out
 * to a minute: a poll that answers within the test can only have been woken by the commit.
 */
function wakeOnlySignal(): { signal: CommitSignal; inner: InProcessCommitSignal; announced: string[] } {
  const inner = new InProcessCommitSignal();
  const announced: string[] = [];
  const signal: CommitSignal = {
    committed: (ids) => {
      const list = [...ids];
      announced.push(...list);
      inner.committed(list);
    },
    watch: (requestId) => {
      const watch = inner.watch(requestId);
      return { wait: () => watch.wait(60_000), close: () => watch.close() };
    },
  };
  return { signal, inner, announced };
}

describe('commits wake waiting retrieve_future polls (shared/base/commit-signal.ts)', () => {
  it('a poll held open on a pending future answers the result once the worker announces its commit', async () => {
    const { signal, inner, announced } = wakeOnlySignal();
    const acme = h.tenant('acme');
    const created = await acme.createModel(4, 7);
    const pass = await acme.pass('forward_backward', created.model_id, crossEntropy(textDatum('wake me')));
    const poll = (requestId: string) =>
      retrieveFuture(
        { ...acme.ctx(), deadline: Date.now() + 60_000 },
        { request_id: requestId },
        { commits: signal, sleep: () => new Promise(() => {}) },
      );
    const answers = Promise.all([poll(created.request_id), poll(pass)]);
    let settled = false;
    void answers.then(() => (settled = true));

    const dispatched = await h.dispatch({ only: (row) => row.model_id === created.model_id });
    expect(dispatched).toBeDefined();
    // Nothing has committed yet: both polls are still waiting.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(settled).toBe(false);

    const outcome = await runWorkItem(dispatched!.manifest, { backend: h.backend, commits: signal });
    expect(outcome.models.map((model) => model.outcome)).toEqual(['committed']);
    expect(announced).toEqual([created.request_id, pass]);
    const [, passAnswer] = await answers;
    expect(passAnswer).toMatchObject({ metrics: expect.any(Object) });
    expect(inner.watched).toBe(0);
  });

  it('a work item delivered again commits nothing and announces nothing', async () => {
    const { signal, announced } = wakeOnlySignal();
    const beta = h.tenant('beta');
    const created = await beta.createModel(2, 1);
    const dispatched = await h.dispatch({ only: (row) => row.model_id === created.model_id });
    await runWorkItem(dispatched!.manifest, { backend: h.backend, commits: signal });
    expect(announced).toEqual([created.request_id]);
    const again = await runWorkItem(dispatched!.manifest, { backend: h.backend, commits: signal });
    expect(again.models.map((model) => model.outcome)).toEqual(['not_inflight']);
    expect(announced).toEqual([created.request_id]);
  });

  it('with no signal (AWS) the poll re-reads every 100 ms, not on a doubling backoff', async () => {
    const gamma = h.tenant('gamma');
    const created = await gamma.createModel(2, 2);
    const pauses: number[] = [];
    const answer = await retrieveFuture(
      { ...gamma.ctx(), deadline: Date.now() + 1_500 },
      { request_id: created.request_id },
      {
        commits: NO_COMMIT_SIGNAL,
        sleep: (ms) => {
          pauses.push(ms);
          return new Promise((resolve) => setTimeout(resolve, 5));
        },
      },
    );
    expect(answer).toMatchObject({ type: 'try_again' });
    // Pauses near the deadline are cut short by it; none is ever longer than 100 ms within 5 s.
    expect(pauses.slice(0, 10)).toEqual(Array.from({ length: 10 }, () => 100));
    expect(Math.max(...pauses)).toBe(100);
  });

  it('with no signal (AWS) the re-read that finds the row terminal is the answer: no second, strong read', async () => {
    const delta = h.tenant('delta');
    const created = await delta.createModel(2, 4);
    const pass = await delta.pass('forward_backward', created.model_id, crossEntropy(textDatum('one read')));
    // The futures reads the poll sends (not the dispatch's or the worker's, which share the clients), strong or not.
    const reads: boolean[] = [];
    let working = false;
    const name = 'retrieveReads';
    h.cloud.clients.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as { TableName?: unknown; ConsistentRead?: unknown };
        if (
          !working &&
          context.commandName === 'GetItemCommand' &&
          input.TableName === config().table('futures')
        )
          reads.push(input.ConsistentRead === true);
        return next(args);
      },
      { step: 'initialize', name, override: true },
    );
    let run: Promise<unknown> | undefined;
    try {
      const answer = await retrieveFuture(
        { ...delta.ctx(), deadline: Date.now() + 30_000 },
        { request_id: pass },
        {
          commits: NO_COMMIT_SIGNAL,
          sleep: async () => {
            // The first pause runs the work item to its commit; later ones are short.
            if (run === undefined) {
              working = true;
              const dispatched = await h.dispatch({ only: (row) => row.model_id === created.model_id });
              run = runWorkItem(dispatched!.manifest, { backend: h.backend, commits: NO_COMMIT_SIGNAL });
              await run.finally(() => (working = false));
            }
            await new Promise((resolve) => setTimeout(resolve, 5));
          },
        },
      );
      expect(answer).toMatchObject({ metrics: expect.any(Object) });
    } finally {
      h.cloud.clients.doc.middlewareStack.remove(name);
    }
    // The first read (the head, strong), then eventually consistent re-reads, the last of which answered.
    expect(reads[0]).toBe(true);
    expect(reads.length).toBeGreaterThanOrEqual(2);
    expect(reads.slice(1)).toEqual(reads.slice(1).map(() => false));
  });

  it('polls woken by one commit re-read together: one BatchGetItem for all of them, each answered its own result', async () => {
    const { signal } = wakeOnlySignal();
    const eps = h.tenant('epsilon');
    const created = await eps.createModel(2, 6);
    const passes = [];
    for (const text of ['one', 'two', 'three']) {
      passes.push(await eps.pass('forward_backward', created.model_id, crossEntropy(textDatum(text))));
    }
    const logged = loggedClients(h.cloud.endpoints, h.cloud.prefix);
    const ctx = { ...eps.ctx(), clients: logged.clients, deadline: Date.now() + 60_000 };
    const polls = [created.request_id, ...passes].map((request_id) =>
      retrieveFuture(ctx, { request_id }, { commits: signal }),
    );
    await new Promise((resolve) => setTimeout(resolve, 200));
    // Each poll read its row's head once, strongly, at its start.
    expect(logged.log.calls).toEqual(Array.from({ length: 4 }, () => 'GetItem futures'));
    logged.log.reset();
    const dispatched = await h.dispatch({ only: (row) => row.model_id === created.model_id });
    await runWorkItem(dispatched!.manifest, { backend: h.backend, commits: signal });
    const answers = await Promise.all(polls);
    expect(answers[0]).toEqual({ model_id: created.model_id, type: 'create_model' });
    for (const answer of answers.slice(1)) expect(answer).toMatchObject({ metrics: expect.any(Object) });
    expect(logged.log.calls).toEqual(['BatchGetItem futures']);
    logged.clients.dynamo.destroy();
  });
});
