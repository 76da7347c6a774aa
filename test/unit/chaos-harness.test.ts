import { SendMessageCommand } from '@aws-sdk/client-sqs';
import { GetCommand, TransactWriteCommand } from '@aws-sdk/lib-dynamodb';
import { afterEach, describe, expect, it } from 'vitest';
import { DeliveryLog } from '../../bench/chaos/delivery-log.js';
import { CommitEffects } from '../../bench/chaos/effects.js';
import { isInjected, Processes } from '../../bench/chaos/processes.js';
import { faultHook } from '../../shared/base/fault-hook.js';
import { FakeWire } from '../support/faults/fake-wire.js';
import { CrashPoints, createFaultInjector } from '../support/faults.js';

/**
 * The chaos run's own instruments, which its verdict rests on: the observer that counts a commit
 * applied twice (R7), simulated process death, and the attribution of failed deliveries. Each is
 * shown to report what it must, so a clean chaos run means something.
 */

const FUTURES = 'futures';
const MODELS = 'models';

/** A model commit as the worker sends it: the model row on its base, then the futures it ends. */
function commit(token: string, modelId: string, base: number, applied: number, requestIds: string[]) {
  return new TransactWriteCommand({
    ClientRequestToken: token,
    TransactItems: [
      {
        Update: {
          TableName: MODELS,
          Key: { model_id: modelId },
          UpdateExpression: 'SET applied_through = :applied REMOVE inflight, lease_until',
          ConditionExpression: 'inflight = :token AND applied_through = :base',
          ExpressionAttributeValues: { ':applied': applied, ':base': base, ':token': token },
        },
      },
      ...requestIds.map((requestId) => ({
        Update: {
          TableName: FUTURES,
          Key: { request_id: requestId },
          UpdateExpression: 'SET #status = :status, updated_at = :now REMOVE live',
          ConditionExpression: '#status = :pending',
          ExpressionAttributeNames: { '#status': 'status' },
          ExpressionAttributeValues: { ':status': 'completed', ':now': 1, ':pending': 'pending' },
        },
      })),
    ],
  });
}

describe('commit effects (R7 as the chaos run measures it)', () => {
  it('a retry with the same token is one commit; two commits of one seq or one future are duplicates', async () => {
    const clients = new FakeWire({ [FUTURES]: 'request_id', [MODELS]: 'model_id' }).clients();
    const effects = new CommitEffects({ futures: FUTURES, models: MODELS });
    effects.attach(clients.dynamo);
    await clients.doc.send(commit('t1', 'm', 0, 2, ['r1', 'r2']));
    await clients.doc.send(commit('t1', 'm', 0, 2, ['r1', 'r2']));
    await clients.doc.send(commit('t2', 'm', 2, 3, ['r3']));
    expect(effects.duplicateFutures()).toEqual([]);
    expect(effects.duplicateSeqs()).toEqual([]);
    expect(effects.appliedSeqs('m')).toBe(3);

    // Another transaction applying seq 3 again and ending r3 again.
    await clients.doc.send(commit('t3', 'm', 2, 3, ['r3']));
    expect(effects.duplicateFutures()).toEqual(['r3']);
    expect(effects.duplicateSeqs()).toEqual(['m#3']);
  });

  it('a commit whose answer was replaced by a timeout still counts: it landed', async () => {
    const clients = new FakeWire({ [FUTURES]: 'request_id', [MODELS]: 'model_id' }).clients();
    const effects = new CommitEffects({ futures: FUTURES, models: MODELS });
    const injector = createFaultInjector({
      seed: 3,
      operations: { TransactWriteItems: { timeoutAfterWrite: 1 } },
    });
    injector.attach(clients);
    effects.attach(clients.dynamo);
    await expect(clients.doc.send(commit('t1', 'm', 0, 1, ['r1']))).rejects.toMatchObject({
      name: 'TimeoutError',
    });
    expect(effects.appliedSeqs('m')).toBe(1);
  });
});

describe('simulated processes', () => {
  let uninstall: (() => void) | undefined;
  afterEach(() => {
    uninstall?.();
    uninstall = undefined;
  });

  it('a crash point kills the worker it is hit in: its later calls fail, other processes go on', async () => {
    const wire = new FakeWire();
    const clients = wire.clients();
    const processes = new Processes();
    processes.attach(clients);
    const points = new CrashPoints(1).arm('worker:after-state-write');
    uninstall = processes.installCrashes(points);
    const killed: string[] = [];
    processes.onKill = (process) => killed.push(`${process.kind}#${process.id}:${process.killedBy}`);

    const worker = processes.create('lambda-worker', true);
    const other = processes.create('process-worker', true);
    const crash = await processes.run(worker, async () => {
      try {
        faultHook.crash('worker:after-state-write');
      } catch (error) {
        return error;
      }
    });
    expect(crash).toMatchObject({ name: 'SimulatedCrash' });
    expect(killed).toEqual([`lambda-worker#${worker.id}:worker:after-state-write`]);
    const send = () => clients.sqs.send(new SendMessageCommand({ QueueUrl: 'q', MessageBody: 'x' }));
    await expect(processes.run(worker, send)).rejects.toMatchObject({ name: 'ProcessKilled' });
    await expect(processes.run(other, send)).resolves.toBeDefined();
    expect(wire.messages).toEqual(['x']);
  });

  it('a scheduler crash is only its exception: the process lives on', async () => {
    const clients = new FakeWire().clients();
    const processes = new Processes();
    processes.attach(clients);
    uninstall = processes.installCrashes(new CrashPoints(1).arm('scheduler:after-claim'));
    const scheduler = processes.create('scheduler', false);
    await processes.run(scheduler, async () => {
      expect(() => faultHook.crash('scheduler:after-claim')).toThrow('simulated crash');
    });
    expect(scheduler.dead).toBe(false);
    await expect(
      processes.run(scheduler, () => clients.doc.send(new GetCommand({ TableName: 't', Key: { pk: 'a' } }))),
    ).resolves.toBeDefined();
  });

  it('injected errors are counted against the process that saw them', async () => {
    const clients = new FakeWire().clients();
    const processes = new Processes();
    processes.attach(clients);
    createFaultInjector({ seed: 1, rates: { throttle: 1 } }).attach(clients);
    const worker = processes.create('process-worker', true);
    const error = await processes
      .run(worker, () => clients.doc.send(new GetCommand({ TableName: 't', Key: { pk: 'a' } })))
      .catch((caught: unknown) => caught);
    expect(isInjected(error)).toBe(true);
    expect(worker.injected).toBe(1);
    expect(isInjected(new Error('socket hang up'))).toBe(false);
  });
});

describe('delivery attribution', () => {
  it('a dead letter is explained only when every failed delivery of its work item was injected', () => {
    const log = new DeliveryLog();
    log.record('wi-a', { by: 'lambda-worker', done: false, explained: true });
    log.record('wi-a', { by: 'process-worker', done: false, explained: true });
    log.record('wi-b', { by: 'lambda-worker', done: false, explained: true });
    log.record('wi-b', { by: 'lambda-worker', done: false, explained: false, detail: 'models 1 failed' });
    log.record('wi-c', { by: 'lambda-worker', done: true, explained: false });
    expect(log.explainsDeadLetter('wi-a')).toBe(true);
    expect(log.explainsDeadLetter('wi-b')).toBe(false);
    expect(log.explainsDeadLetter('wi-c')).toBe(false);
    expect(log.failures()).toEqual({ failed: 4, unexplained: 1 });
    expect(log.unexplainedDetails).toEqual(['wi-b (lambda-worker): models 1 failed']);
  });
});
