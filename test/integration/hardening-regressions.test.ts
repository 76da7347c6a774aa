import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { runWorkItem } from '../../shared/services/worker/index.js';
import { crossEntropy, textDatum, WorkerHarness } from '../support/worker-harness.js';

/**
 * Regression tests for hardening finding 2: numbers that pass validation but that DynamoDB cannot store
 * as numbers (above 2^53, below 1e-130) used to fail the model's whole commit as "outcome unknown",
 * until K attempts failed it with a server error; a create_model that shared the work item was lost
 * with it ("has no weights"). Results are stored as JSON text now, and a result that is not finite
 * fails only its own step, as a user error.
 */

let h: WorkerHarness;

beforeAll(async () => {
  h = await WorkerHarness.start();
});

afterAll(() => h?.cloud.clients.dynamo.destroy());

async function drain(): Promise<void> {
  const backend = new ReferenceBackend();
  for (let dispatched = await h.dispatch(); dispatched; dispatched = await h.dispatch()) {
    const outcome = await runWorkItem(dispatched.manifest, { backend });
    expect(outcome.retry).toBeFalsy();
    expect(outcome.models.every((model) => model.outcome === 'committed')).toBe(true);
  }
}

const lossSum = (answer: unknown) => (answer as { metrics: Record<string, number> }).metrics['loss:sum'];

describe('results DynamoDB numbers cannot hold', () => {
  it('a loss above 2^53 or below 1e-130 completes, beside the create_model it shares a work item with', async () => {
    const tenant = h.tenant('numbers');
    const model = await tenant.createModel(4, 7);
    const huge = await tenant.pass(
      'forward_backward',
      model.model_id,
      crossEntropy(textDatum('abc', [1e20, 1e20])),
    );
    const tiny = await tenant.pass('forward', model.model_id, crossEntropy(textDatum('abc', [1e-38, 0])));
    const after = await tenant.pass('forward', model.model_id, crossEntropy(textDatum('abc')));
    await drain();
    const answers = await h.answers();
    expect(answers.get(model.request_id)).toMatchObject({ model_id: model.model_id });
    expect(lossSum(answers.get(huge))).toBeGreaterThan(2 ** 53);
    const small = lossSum(answers.get(tiny)) as number;
    expect(small).toBeGreaterThan(0);
    expect(small).toBeLessThan(1e-30);
    expect(lossSum(answers.get(after))).toBeGreaterThan(0);
    // Bit-exact to running the same requests one at a time (R1).
    const oracle = await h.oracle();
    for (const id of [model.request_id, huge, tiny, after]) {
      expect(answers.get(id)).toEqual(oracle.get(id));
    }
  });

  it('a step whose own result is not finite fails as a user error; the model carries on', async () => {
    const tenant = h.tenant('overflow');
    const model = await tenant.createModel(4, 9);
    await tenant.pass('forward_backward', model.model_id, crossEntropy(textDatum('abc')));
    await tenant.optimStep(model.model_id, { learning_rate: 1e300 });
    const poisoned = await tenant.pass('forward', model.model_id, crossEntropy(textDatum('abc')));
    const saved = await tenant.saveWeights(model.model_id, 'after-overflow');
    await drain();
    const answers = await h.answers();
    expect(answers.get(poisoned)).toEqual({ category: 'user' });
    const row = await h.answer('overflow', poisoned);
    expect(row).toMatchObject({
      error: expect.stringMatching(/result is not finite \(result\.loss_fn_outputs\.0\./),
    });
    expect(answers.get(saved)).toMatchObject({ type: 'save_weights' });
  });
});

describe('retrieve_future before the tenant check (hardening finding 6)', () => {
  it('reads only the row head, so another tenant learns nothing from the time a large result takes', async () => {
    const tenant = h.tenant('owner');
    const model = await tenant.createModel(4, 1);
    const big = await tenant.pass(
      'forward_backward',
      model.model_id,
      crossEntropy(textDatum('x'.repeat(2000))),
    );
    await drain();
    // The attributes each read asks for (undefined: the whole row).
    const reads: (string[] | undefined)[] = [];
    const doc = h.cloud.clients.doc;
    doc.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'GetCommand' || context.commandName === 'GetItemCommand') {
          const input = args.input as {
            ProjectionExpression?: string;
            ExpressionAttributeNames?: Record<string, string>;
          };
          reads.push(
            input.ProjectionExpression === undefined
              ? undefined
              : Object.values(input.ExpressionAttributeNames ?? {}).sort(),
          );
        }
        return next(args);
      },
      { step: 'initialize', name: 'recordGets' },
    );
    const head = ['request_id', 'request_type', 'status', 'tenant'];
    try {
      await expect(h.answer('rival', big)).rejects.toMatchObject({ name: 'NotFoundError' });
      expect(reads).toEqual([head]);
      reads.length = 0;
      expect(await h.answer('owner', big)).toMatchObject({ metrics: expect.any(Object) });
      // The owner's read of the outcome (head, result, result key, error) comes after the head's.
      expect(reads).toEqual([head, [...head, 'error', 'result', 'result_key'].sort()]);
    } finally {
      doc.middlewareStack.remove('recordGets');
    }
  });
});
