import {
  BatchGetItemCommand,
  BatchWriteItemCommand,
  ProvisionedThroughputExceededException,
  TransactionCanceledException,
} from '@aws-sdk/client-dynamodb';
import { GetObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { RequestThrottled, SendMessageCommand } from '@aws-sdk/client-sqs';
import {
  BatchGetCommand,
  BatchWriteCommand,
  GetCommand,
  PutCommand,
  TransactWriteCommand,
} from '@aws-sdk/lib-dynamodb';
import { describe, expect, it, vi } from 'vitest';
import type { AwsClients } from '../../shared/aws/clients.js';
import { transactWrite } from '../../shared/aws/transact.js';
import { logger } from '../../shared/base/logger.js';
import { errorResponse } from '../../shared/services/api/router.js';
import { FakeWire } from '../support/faults/fake-wire.js';
import {
  createFaultInjector,
  type FaultKind,
  type FaultPlan,
  INJECTED_ERROR_NAMES,
} from '../support/faults.js';

/**
 * The fault library against the real SDK clients (serialization, document marshalling, error
 * parsing) talking to an in-memory service that records what reached it: a fault that fires
 * "before executing" must leave no trace there, one that fires "after the write landed" must.
 */

const TABLE = 'futures';
const OTHER_TABLE = 'registry';
const QUEUE = 'http://fake-wire.local/000000000000/work';
const CALLS = 400;

function rig(plan: Partial<FaultPlan> = {}) {
  const wire = new FakeWire({ [TABLE]: 'request_id', [OTHER_TABLE]: 'pk' });
  const clients = wire.clients();
  const faults = createFaultInjector({ seed: 42, ...plan });
  const detach = faults.attach(clients);
  return { wire, clients, faults, detach, clean: wire.clients() };
}

type Call = (clients: AwsClients, index: number) => Promise<unknown>;

const put: Call = (clients, index) =>
  clients.doc.send(new PutCommand({ TableName: TABLE, Item: { request_id: `r${index}`, n: index } }));
const get: Call = (clients, index) =>
  clients.doc.send(new GetCommand({ TableName: TABLE, Key: { request_id: `r${index}` } }));
const putObject: Call = (clients, index) =>
  clients.s3.send(
    new PutObjectCommand({ Bucket: 'data', Key: `payloads/${index}.json`, Body: `{"n":${index}}` }),
  );
const sendMessage: Call = (clients, index) =>
  clients.sqs.send(new SendMessageCommand({ QueueUrl: QUEUE, MessageBody: `m${index}` }));
const transact: Call = (clients, index) =>
  clients.doc.send(
    new TransactWriteCommand({
      TransactItems: [
        { Put: { TableName: TABLE, Item: { request_id: `t${index}` } } },
        { Put: { TableName: OTHER_TABLE, Item: { pk: `idem#${index}` } } },
      ],
    }),
  );
const batchWrite: Call = (clients, index) =>
  clients.doc.send(
    new BatchWriteCommand({
      RequestItems: {
        [TABLE]: Array.from({ length: 4 }, (_, k) => ({
          PutRequest: { Item: { request_id: `b${index}.${k}` } },
        })),
      },
    }),
  );

/** Runs `count` calls one after another; each outcome is 'ok' or the error's name. */
async function run(call: Call, clients: AwsClients, count = CALLS, offset = 0): Promise<string[]> {
  const outcomes: string[] = [];
  for (let index = offset; index < offset + count; index++) {
    try {
      await call(clients, index);
      outcomes.push('ok');
    } catch (error) {
      outcomes.push(error instanceof Error ? error.name : String(error));
    }
  }
  return outcomes;
}

/** Within 4.5 standard deviations of a binomial(n, p): fails for a wrong rate, not by chance. */
function expectRate(observed: number, trials: number, rate: number): void {
  const sd = Math.sqrt(trials * rate * (1 - rate));
  expect(observed).toBeGreaterThanOrEqual(trials * rate - 4.5 * sd);
  expect(observed).toBeLessThanOrEqual(trials * rate + 4.5 * sd);
}

describe('off unless configured', () => {
  it('an injector without rates lets every call through to the service', async () => {
    const { wire, clients, faults } = rig();
    const outcomes = [
      ...(await run(put, clients, 40)),
      ...(await run(get, clients, 40)),
      ...(await run(transact, clients, 20)),
      ...(await run(batchWrite, clients, 20)),
      ...(await run(putObject, clients, 20)),
      ...(await run(sendMessage, clients, 20)),
    ];
    expect(outcomes.every((outcome) => outcome === 'ok')).toBe(true);
    expect(wire.calls).toHaveLength(160);
    expect(faults.total).toBe(0);
    expect(faults.calls).toMatchObject({ PutItem: 40, GetItem: 40, PutObject: 20, SendMessage: 20 });
  });

  it('off() stops every fault and on() resumes them; detach() removes the middleware', async () => {
    const { clients, faults, detach } = rig({ rates: { throttle: 1 } });
    expect(await run(put, clients, 3)).toEqual(Array(3).fill(INJECTED_ERROR_NAMES.throttle.dynamodb));
    faults.off();
    expect(await run(put, clients, 3)).toEqual(['ok', 'ok', 'ok']);
    faults.on();
    expect(await run(put, clients, 1)).toEqual([INJECTED_ERROR_NAMES.throttle.dynamodb]);
    detach();
    expect(await run(put, clients, 2)).toEqual(['ok', 'ok']);
    expect(faults.counts.throttle).toBe(4);
  });
});

interface RateCase {
  readonly kind: FaultKind;
  readonly operation: string;
  readonly call: Call;
  readonly error: string;
  /** Whether a faulted call still reached the service. */
  readonly executes: boolean;
}

const RATE_CASES: RateCase[] = [
  {
    kind: 'throttle',
    operation: 'PutItem',
    call: put,
    error: 'ProvisionedThroughputExceededException',
    executes: false,
  },
  { kind: 'throttle', operation: 'PutObject', call: putObject, error: 'SlowDown', executes: false },
  {
    kind: 'throttle',
    operation: 'SendMessage',
    call: sendMessage,
    error: 'RequestThrottled',
    executes: false,
  },
  { kind: 'serverError', operation: 'GetItem', call: get, error: 'InternalServerError', executes: false },
  { kind: 'serverError', operation: 'PutObject', call: putObject, error: 'InternalError', executes: false },
  {
    kind: 'serverError',
    operation: 'SendMessage',
    call: sendMessage,
    error: 'InternalFailure',
    executes: false,
  },
  {
    kind: 'transactionConflict',
    operation: 'TransactWriteItems',
    call: transact,
    error: 'TransactionCanceledException',
    executes: false,
  },
  { kind: 'timeoutAfterWrite', operation: 'PutItem', call: put, error: 'TimeoutError', executes: true },
  {
    kind: 'timeoutAfterWrite',
    operation: 'PutObject',
    call: putObject,
    error: 'TimeoutError',
    executes: true,
  },
  {
    kind: 'timeoutAfterWrite',
    operation: 'SendMessage',
    call: sendMessage,
    error: 'TimeoutError',
    executes: true,
  },
];

describe('each fault kind fires at its configured rate (seed 42)', () => {
  it.each(RATE_CASES)('$kind on $operation', async ({ kind, operation, call, error, executes }) => {
    const rate = 0.25;
    const { wire, clients, faults } = rig({ rates: { [kind]: rate } });
    const outcomes = await run(call, clients);
    const failed = outcomes.filter((outcome) => outcome !== 'ok');
    expect(new Set(failed)).toEqual(new Set([error]));
    expect(faults.counts[kind]).toBe(failed.length);
    expect(faults.byOperation[operation]?.[kind]).toBe(failed.length);
    expectRate(failed.length, CALLS, rate);
    expect(wire.reached(operation)).toHaveLength(executes ? CALLS : CALLS - failed.length);
  });

  it('unprocessed on BatchWriteItem: per call, and only the executed part is written', async () => {
    const { wire, clients, faults } = rig({ rates: { unprocessed: 0.3 } });
    let partial = 0;
    for (let index = 0; index < CALLS; index++) {
      const answer = await batchWrite(clients, index);
      const held =
        (answer as { UnprocessedItems?: Record<string, unknown[]> }).UnprocessedItems?.[TABLE] ?? [];
      if (held.length > 0) partial++;
    }
    expect(faults.counts.unprocessed).toBe(partial);
    expectRate(partial, CALLS, 0.3);
    const written = wire
      .reached('BatchWriteItem')
      .flatMap((call) => (call.input.RequestItems as Record<string, unknown[]>)[TABLE] ?? []);
    expect(wire.table(TABLE).size).toBe(written.length);
    expect(written.length).toBeLessThan(CALLS * 4);
  });

  it('latency on GetItem: delays within the configured range', async () => {
    const delays: number[] = [];
    const sleep = async (ms: number) => {
      delays.push(ms);
    };
    const { clients, faults } = rig({ rates: { latency: 0.2 }, latencyMs: { min: 10, max: 30 }, sleep });
    expect(await run(get, clients)).toEqual(Array(CALLS).fill('ok'));
    expect(delays).toHaveLength(faults.counts.latency);
    expectRate(delays.length, CALLS, 0.2);
    expect(Math.min(...delays)).toBeGreaterThanOrEqual(10);
    expect(Math.max(...delays)).toBeLessThanOrEqual(30);
  });

  it('is deterministic per seed: the same seed faults the same calls, another seed others', async () => {
    const rates = { throttle: 0.2, serverError: 0.1 };
    const first = await run(put, rig({ rates }).clients, 200);
    const again = await run(put, rig({ rates }).clients, 200);
    const other = await run(put, rig({ seed: 43, rates }).clients, 200);
    expect(again).toEqual(first);
    expect(other).not.toEqual(first);
  });

  it('draws per operation: calls of other operations in between do not change which calls fault', async () => {
    const rates = { throttle: 0.3 };
    const alone = await run(put, rig({ rates }).clients, 100);
    const { clients } = rig({ rates });
    const interleaved: string[] = [];
    for (let index = 0; index < 100; index++) {
      interleaved.push(...(await run(put, clients, 1, index)));
      await run(get, clients, 2, index);
    }
    expect(interleaved).toEqual(alone);
  });
});

describe('the errors look like AWS sent them', () => {
  it('DynamoDB throttles and 5xx are the SDK classes, and the API answers them 503', async () => {
    vi.spyOn(logger, 'warn').mockImplementation(() => {});
    const throttled = rig({ rates: { throttle: 1 } });
    const throttle = await put(throttled.clients, 1).catch((error: unknown) => error);
    expect(throttle).toBeInstanceOf(ProvisionedThroughputExceededException);
    expect(throttle).toMatchObject({
      $metadata: { httpStatusCode: 400 },
      message: expect.stringContaining('injected'),
    });
    expect(errorResponse(throttle).status).toBe(503);

    const failing = rig({ rates: { serverError: 1 } });
    const failure = await get(failing.clients, 1).catch((error: unknown) => error);
    expect(failure).toMatchObject({
      name: 'InternalServerError',
      $fault: 'server',
      $metadata: { httpStatusCode: 500 },
    });
    expect(errorResponse(failure).status).toBe(503);
  });

  it('S3 SlowDown is a 503 and SQS throttling is RequestThrottled', async () => {
    const { clients } = rig({ rates: { throttle: 1 } });
    const slowDown = await putObject(clients, 1).catch((error: unknown) => error);
    expect(slowDown).toMatchObject({
      name: 'SlowDown',
      $fault: 'server',
      $metadata: { httpStatusCode: 503 },
    });
    expect(await sendMessage(clients, 1).catch((error: unknown) => error)).toBeInstanceOf(RequestThrottled);
  });

  it('a TransactionConflict names one item, writes nothing, and the project treats it as retryable', async () => {
    const { wire, clients } = rig({ rates: { transactionConflict: 1 } });
    const conflict = await transact(clients, 1).catch((error: unknown) => error);
    expect(conflict).toBeInstanceOf(TransactionCanceledException);
    const codes = (conflict as TransactionCanceledException).CancellationReasons?.map(
      (reason) => reason.Code,
    );
    expect(codes).toHaveLength(2);
    expect(codes?.filter((code) => code === 'TransactionConflict')).toHaveLength(1);
    expect(codes?.filter((code) => code === 'None')).toHaveLength(1);

    const outcome = await transactWrite(
      [{ Put: { TableName: TABLE, Item: { request_id: 'x' } } }],
      'token-1',
      clients.doc,
    );
    expect(outcome).toEqual({ ok: false, conditionFailed: false, codes: ['TransactionConflict'] });
    expect(wire.reached('TransactWriteItems')).toHaveLength(0);
    expect(wire.table(TABLE).size).toBe(0);
  });
});

describe('a timeout after the write landed', () => {
  it('PutItem, TransactWriteItems, PutObject and SendMessage: the caller gets a TimeoutError, the write is there', async () => {
    const { wire, clients, clean } = rig({ rates: { timeoutAfterWrite: 1 } });
    await expect(put(clients, 7)).rejects.toMatchObject({ name: 'TimeoutError', code: 'ETIMEDOUT' });
    expect(
      (await clean.doc.send(new GetCommand({ TableName: TABLE, Key: { request_id: 'r7' } }))).Item,
    ).toEqual({
      request_id: 'r7',
      n: 7,
    });

    await expect(transact(clients, 3)).rejects.toMatchObject({ name: 'TimeoutError' });
    expect(wire.table(TABLE).has(JSON.stringify({ S: 't3' }))).toBe(true);
    expect(wire.table(OTHER_TABLE).has(JSON.stringify({ S: 'idem#3' }))).toBe(true);

    await expect(putObject(clients, 5)).rejects.toMatchObject({ name: 'TimeoutError' });
    const stored = await clean.s3.send(new GetObjectCommand({ Bucket: 'data', Key: 'payloads/5.json' }));
    expect(await stored.Body?.transformToString()).toBe('{"n":5}');

    await expect(sendMessage(clients, 9)).rejects.toMatchObject({ name: 'TimeoutError' });
    expect(wire.messages).toEqual(['m9']);
  });

  it('never fires on reads', async () => {
    const { clients, clean, faults } = rig({ rates: { timeoutAfterWrite: 1 } });
    await put(clean, 1);
    expect(await run(get, clients, 20)).toEqual(Array(20).fill('ok'));
    expect(faults.counts.timeoutAfterWrite).toBe(0);
  });
});

describe('UnprocessedItems and UnprocessedKeys', () => {
  it('BatchWriteItem (document client): held-back puts are not written until retried', async () => {
    const { wire, clients, faults } = rig({ rates: { unprocessed: 1 } });
    const input = {
      RequestItems: {
        [TABLE]: Array.from({ length: 10 }, (_, k) => ({ PutRequest: { Item: { request_id: `u${k}`, k } } })),
      },
    };
    const snapshot = structuredClone(input);
    const answer = await clients.doc.send(new BatchWriteCommand(input));
    expect(input).toEqual(snapshot);
    const held = answer.UnprocessedItems?.[TABLE] ?? [];
    expect(held.length).toBeGreaterThanOrEqual(1);
    expect(held.length).toBeLessThanOrEqual(9);
    const heldIds = held.map((write) => String(write.PutRequest?.Item?.request_id));
    const stored = [...wire.table(TABLE).values()].map((item) => String(item.request_id?.S));
    expect(stored).toHaveLength(10 - held.length);
    expect(stored.filter((id) => heldIds.includes(id))).toEqual([]);
    expect(new Set([...stored, ...heldIds])).toEqual(new Set(Array.from({ length: 10 }, (_, k) => `u${k}`)));
    // The retry the caller owes (faults off) writes exactly the rest.
    faults.off();
    const retry = await clients.doc.send(new BatchWriteCommand({ RequestItems: answer.UnprocessedItems }));
    expect(retry.UnprocessedItems).toEqual({});
    expect(wire.table(TABLE).size).toBe(10);
    expect(wire.table(TABLE).get(JSON.stringify({ S: heldIds[0] }))).toMatchObject({
      k: { N: expect.any(String) },
    });
  });

  it('BatchWriteItem (raw client, two tables): the held part keeps its tables and marshalled form', async () => {
    const { wire, clients } = rig({ rates: { unprocessed: 1 } });
    const answer = await clients.dynamo.send(
      new BatchWriteItemCommand({
        RequestItems: {
          [TABLE]: Array.from({ length: 3 }, (_, k) => ({
            PutRequest: { Item: { request_id: { S: `a${k}` } } },
          })),
          [OTHER_TABLE]: Array.from({ length: 3 }, (_, k) => ({
            PutRequest: { Item: { pk: { S: `b${k}` } } },
          })),
        },
      }),
    );
    const held = Object.entries(answer.UnprocessedItems ?? {}).flatMap(([table, writes]) =>
      writes.map((write) => `${table}:${Object.values(write.PutRequest?.Item ?? {})[0]?.S}`),
    );
    const stored = [...wire.tables].flatMap(([table, items]) =>
      [...items.values()].map((item) => `${table}:${Object.values(item)[0]?.S}`),
    );
    expect(held.length + stored.length).toBe(6);
    expect(held.filter((entry) => stored.includes(entry))).toEqual([]);
  });

  it('BatchGetItem: held-back keys come back in UnprocessedKeys with the same read options', async () => {
    const { clients, clean } = rig({ rates: { unprocessed: 1 } });
    for (let k = 0; k < 8; k++) await put(clean, k);
    const answer = await clients.doc.send(
      new BatchGetCommand({
        RequestItems: {
          [TABLE]: {
            Keys: Array.from({ length: 8 }, (_, k) => ({ request_id: `r${k}` })),
            ConsistentRead: true,
          },
        },
      }),
    );
    const got = (answer.Responses?.[TABLE] ?? []).map((item) => item.request_id);
    const unprocessed = answer.UnprocessedKeys?.[TABLE];
    expect(unprocessed?.ConsistentRead).toBe(true);
    const held = (unprocessed?.Keys ?? []).map((key) => key.request_id);
    expect(held.length).toBeGreaterThanOrEqual(1);
    expect(got.length + held.length).toBe(8);
    expect(new Set([...got, ...held]).size).toBe(8);

    const raw = await clients.dynamo.send(
      new BatchGetItemCommand({
        RequestItems: { [TABLE]: { Keys: [{ request_id: { S: 'r0' } }, { request_id: { S: 'r1' } }] } },
      }),
    );
    expect((raw.Responses?.[TABLE] ?? []).length + (raw.UnprocessedKeys?.[TABLE]?.Keys ?? []).length).toBe(2);
  });

  it('a batch of one is never split (DynamoDB runs it or throttles it whole)', async () => {
    const { clients, faults } = rig({ rates: { unprocessed: 1 } });
    const answer = await clients.doc.send(
      new BatchWriteCommand({
        RequestItems: { [TABLE]: [{ PutRequest: { Item: { request_id: 'solo' } } }] },
      }),
    );
    expect(answer.UnprocessedItems).toEqual({});
    expect(faults.counts.unprocessed).toBe(0);
  });
});

describe('switches per kind and per operation', () => {
  it('an operation rate wins over the kind rate, both ways', async () => {
    const { clients } = rig({ rates: { throttle: 1 }, operations: { GetItem: { throttle: 0 } } });
    expect(await run(get, clients, 5)).toEqual(Array(5).fill('ok'));
    expect(new Set(await run(put, clients, 5))).toEqual(new Set([INJECTED_ERROR_NAMES.throttle.dynamodb]));

    const only = rig({ operations: { PutObject: { serverError: 1 } } });
    expect(await run(putObject, only.clients, 3)).toEqual(Array(3).fill('InternalError'));
    expect(await run(put, only.clients, 3)).toEqual(['ok', 'ok', 'ok']);
  });

  it('set() switches one kind for all operations or for one', async () => {
    const { clients, faults } = rig();
    faults.set('throttle', 1);
    faults.set('throttle', 0, 'PutItem');
    expect(await run(put, clients, 3)).toEqual(['ok', 'ok', 'ok']);
    expect(await run(get, clients, 1)).toEqual([INJECTED_ERROR_NAMES.throttle.dynamodb]);
    faults.set('throttle', 0);
    expect(await run(get, clients, 3)).toEqual(['ok', 'ok', 'ok']);
  });

  it('refuses unknown kinds and rates outside [0, 1]', () => {
    expect(() => createFaultInjector({ seed: 1, rates: { throttle: 1.5 } })).toThrow(/within \[0, 1\]/);
    expect(() => createFaultInjector({ seed: 1, rates: { meteor: 0.1 } as never })).toThrow(
      /unknown fault kind/,
    );
    expect(() => createFaultInjector({ seed: 1 }).set('latency', Number.NaN)).toThrow(/within \[0, 1\]/);
  });
});
