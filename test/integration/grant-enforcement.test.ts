import { randomBytes } from 'node:crypto';
import { GetObjectCommand, HeadObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { GetQueueAttributesCommand, ReceiveMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import {
  GetCommand,
  PutCommand,
  QueryCommand,
  ScanCommand,
  TransactWriteCommand,
  UpdateCommand,
} from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { awsClients } from '../../shared/aws/clients.js';
import { config } from '../../shared/base/config.js';
import { mintRequestId } from '../../shared/base/ids.js';
import { type FunctionId, LIVE_INDEX } from '../../shared/base/topology.js';
import { registryKey } from '../../shared/domain/records.js';
import { createApiKey, createOperatorKey, revokeApiKey } from '../../shared/repositories/api-keys.js';
import { type PayloadReads, readPayloads } from '../../shared/repositories/payloads.js';
import {
  claimSample,
  releaseSampleClaim,
  renewSampleClaim,
} from '../../shared/repositories/samples/claims.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { type ProbeRuntime, startProbeRuntime } from '../support/probe-runtime.js';

type Probe = () => Promise<unknown>;
type Outcome = 'allowed' | { readonly name: string; readonly message: string };

/**
 * The local runtime enforces each function's grants as its IAM role would on AWS. Every function
 * runs the same probe handler, with the real topology's grants; only the triggers are schedules, so
 * a test fires a function and gets the probe's outcome back.
 */
describe('local runtime: grant enforcement', () => {
  let cloud: TestCloud;
  let probes: ProbeRuntime;

  /** Runs `call` as `functionId`, through the runtime's invoker. */
  const runAs = async (functionId: FunctionId, call: Probe): Promise<Outcome> => {
    const outcome = await probes.runAs(functionId, call);
    return 'value' in outcome ? 'allowed' : outcome;
  };

  beforeAll(async () => {
    cloud = await setupTestCloud();
    probes = await startProbeRuntime(cloud);
  });
  afterAll(async () => {
    await probes?.stop();
  });

  const readRegistry = async (pk: string) =>
    (await cloud.clients.doc.send(new GetCommand({ TableName: cloud.names.tables.registry, Key: { pk } })))
      .Item;
  const readPrefixRow = async (pk: string) =>
    (await cloud.clients.doc.send(new GetCommand({ TableName: cloud.names.tables.prefixes, Key: { pk } })))
      .Item;

  it('denies a table write the function is not granted, before anything is written', async () => {
    const put = () =>
      awsClients().doc.send(
        // The api's env has no PREFIXES_TABLE (as deployed): the name comes from elsewhere.
        new PutCommand({ TableName: cloud.names.tables.prefixes, Item: { pk: 'probe#api' } }),
      );
    const outcome = await runAs('api', put);
    expect(outcome).toMatchObject({ name: 'AccessDeniedException' });
    const { message } = outcome as Exclude<Outcome, 'allowed'>;
    expect(message).toContain('local-api');
    expect(message).toContain('dynamodb:PutItem');
    expect(message).toContain(`table/${cloud.names.tables.prefixes}`);
    expect(await readPrefixRow('probe#api')).toBeUndefined();
    expect(probes.warnings).toHaveBeenCalledWith(
      'local runtime: call denied by the function grants',
      expect.objectContaining({ function: 'api', action: 'dynamodb:PutItem' }),
    );
  });

  it('lets a function granted the same write make it', async () => {
    const put = () =>
      awsClients().doc.send(
        new PutCommand({ TableName: config().table('prefixes'), Item: { pk: 'probe#sweeper' } }),
      );
    expect(await runAs('worker', put)).toBe('allowed');
    expect(await readPrefixRow('probe#sweeper')).toEqual({ pk: 'probe#sweeper' });
  });

  it('lets the scheduler write its tick lock and sample claims to the registry', async () => {
    const put = () =>
      awsClients().doc.send(
        new PutCommand({ TableName: config().table('registry'), Item: { pk: 'tick#probe' } }),
      );
    expect(await runAs('scheduler', put)).toBe('allowed');
    const claim = () =>
      awsClients().doc.send(
        new UpdateCommand({
          TableName: config().table('registry'),
          Key: { pk: 'claim#probe' },
          UpdateExpression: 'ADD claims :one',
          ExpressionAttributeValues: { ':one': 1 },
        }),
      );
    expect(await runAs('scheduler', claim)).toBe('allowed');
  });

  it('checks a transaction item by item: each its own action on its own key', async () => {
    const put = { Put: { TableName: config().table('registry'), Item: { pk: 'idem#probe-transacted' } } };
    const guard = {
      ConditionCheck: {
        TableName: config().table('registry'),
        Key: { pk: 'probe#guard' },
        ConditionExpression: 'attribute_not_exists(pk)',
      },
    };
    const transact = (items: object[]) => () =>
      awsClients().doc.send(new TransactWriteCommand({ TransactItems: items as never }));
    const read = async () =>
      (
        await cloud.clients.doc.send(
          new GetCommand({ TableName: cloud.names.tables.registry, Key: { pk: 'idem#probe-transacted' } }),
        )
      ).Item;
    // The api puts idempotency records but, like every function, may not condition-check anything.
    const denied = await runAs('api', transact([guard, put]));
    expect(denied).toMatchObject({ name: 'AccessDeniedException' });
    expect((denied as Exclude<Outcome, 'allowed'>).message).toContain('dynamodb:ConditionCheckItem');
    expect(await read()).toBeUndefined();
    expect(await runAs('api', transact([put]))).toBe('allowed');
    expect(await read()).toEqual({ pk: 'idem#probe-transacted' });
    // Nor may it put a key of a kind it is not granted, inside a transaction or not.
    const forged = { Put: { TableName: config().table('registry'), Item: { pk: 'probe#transacted' } } };
    expect(await runAs('api', transact([forged]))).toMatchObject({ name: 'AccessDeniedException' });
    // A function without `put` on a table may not put there inside a transaction either: the
    // scheduler's grant on futures is read-only (R5).
    const putFuture = {
      Put: { TableName: config().table('futures'), Item: { request_id: 'probe#transacted' } },
    };
    expect(await runAs('scheduler', transact([putFuture]))).toMatchObject({ name: 'AccessDeniedException' });
  });

  it('tells a Query on the live index from a Query on the table', async () => {
    const query = (IndexName?: string) => () =>
      awsClients().doc.send(
        new QueryCommand({
          TableName: config().table('futures'),
          ...(IndexName === undefined
            ? { KeyConditionExpression: 'request_id = :id' }
            : { IndexName, KeyConditionExpression: 'live = :id' }),
          ExpressionAttributeValues: { ':id': 'none' },
        }),
      );
    // The scheduler plans from the index and never queries the table itself; the worker neither.
    expect(await runAs('scheduler', query())).toMatchObject({ name: 'AccessDeniedException' });
    const denied = await runAs('worker', query(LIVE_INDEX));
    expect(denied).toMatchObject({ name: 'AccessDeniedException' });
    expect((denied as Exclude<Outcome, 'allowed'>).message).toContain(
      `table/${cloud.names.tables.futures}/index/${LIVE_INDEX}`,
    );
    expect(await runAs('scheduler', query(LIVE_INDEX))).toBe('allowed');
  });

  it('keeps a worker off the records it does not own: a key or operator key mint is denied, its claim writes are not', async () => {
    const keyRecords = async () =>
      (
        await cloud.clients.doc.send(
          new ScanCommand({
            TableName: cloud.names.tables.registry,
            FilterExpression: 'begins_with(pk, :key) OR begins_with(pk, :opkey)',
            ExpressionAttributeValues: { ':key': 'key#', ':opkey': 'opkey#' },
          }),
        )
      ).Items ?? [];
    const before = await keyRecords();
    // What a compromised GPU host would try: mint a tenant key, an operator key, or write one directly.
    const mintTenant = await runAs('worker', () =>
      createApiKey(awsClients().doc, config().table('registry'), 'victim'),
    );
    expect(mintTenant).toMatchObject({ name: 'AccessDeniedException' });
    expect((mintTenant as Exclude<Outcome, 'allowed'>).message).toContain('dynamodb:PutItem');
    expect(
      await runAs('worker', () =>
        createOperatorKey(awsClients().doc, config().table('registry'), 'intruder'),
      ),
    ).toMatchObject({
      name: 'AccessDeniedException',
    });
    const direct = () =>
      awsClients().doc.send(
        new TransactWriteCommand({
          TransactItems: [
            { Put: { TableName: config().table('registry'), Item: { pk: 'opkey#forged', operator: 'x' } } },
          ],
        }),
      );
    expect(await probes.runAsProcess('worker', direct)).toMatchObject({ name: 'AccessDeniedException' });
    expect(
      await runAs('worker', () =>
        revokeApiKey(
          awsClients().doc,
          config().table('registry'),
          `tml-${randomBytes(24).toString('base64url')}`,
        ),
      ),
    ).toMatchObject({
      name: 'AccessDeniedException',
    });
    expect(await keyRecords()).toEqual(before);
    // The api looks keys up but may not mint them either: the operator CLI does.
    expect(
      await runAs('api', () => createApiKey(awsClients().doc, config().table('registry'), 'victim')),
    ).toMatchObject({
      name: 'AccessDeniedException',
    });

    // The worker's own records: it renews a sample claim and gives it back, as a running sample does.
    const requestId = mintRequestId(Date.now());
    const now = Date.now();
    const claimed = () =>
      claimSample(
        awsClients().doc,
        config().table('registry'),
        { request_id: requestId, claim_token: 'tok', work_item_id: 'w@1', lease_until: now + 60_000 },
        now,
      );
    // The scheduler's claim is an update (an expired claim is taken over with its count, E2): the
    // action the worker's renewals and the api's cancel marks need on claims too.
    expect(await runAs('scheduler', claimed)).toBe('allowed');
    let renewed: boolean | undefined;
    const renew = async () => {
      renewed = await renewSampleClaim(
        awsClients().doc,
        config().table('registry'),
        requestId,
        'tok',
        now + 120_000,
      );
    };
    expect(await runAs('worker', renew)).toBe('allowed');
    expect(renewed).toBe(true);
    const claim = await readRegistry(registryKey.sampleClaim(requestId));
    expect(claim).toMatchObject({ lease_until: now + 120_000 });
    let released: boolean | undefined;
    const release = async () => {
      released = await releaseSampleClaim(awsClients().doc, config().table('registry'), requestId, 'tok');
    };
    expect(await probes.runAsProcess('worker', release)).toHaveProperty('value');
    expect(released).toBe(true);
    expect(await readRegistry(registryKey.sampleClaim(requestId))).toBeUndefined();
  });

  it('limits objects to the granted key prefixes and answers a missing object as IAM does', async () => {
    const put = (key: string) => () =>
      awsClients().s3.send(new PutObjectCommand({ Bucket: config().bucket, Key: key, Body: 'x' }));
    const exists = (key: string) =>
      cloud.clients.s3.send(new HeadObjectCommand({ Bucket: cloud.names.bucket, Key: key })).then(
        () => true,
        () => false,
      );
    const denied = await runAs('api', put('work/probe'));
    expect(denied).toMatchObject({ name: 'AccessDenied' });
    expect((denied as Exclude<Outcome, 'allowed'>).message).toContain(
      `s3:PutObject on resource: arn:aws:s3:::${cloud.names.bucket}/work/probe`,
    );
    expect(await exists('work/probe')).toBe(false);
    expect(await runAs('scheduler', put('work/probe'))).toBe('allowed');
    expect(await exists('work/probe')).toBe(true);

    // Without ListBucket on the bucket, S3 answers a GET of a missing object with 403, not 404.
    const get = () =>
      awsClients().s3.send(new GetObjectCommand({ Bucket: config().bucket, Key: 'payloads/missing' }));
    expect(await runAs('api', get)).toMatchObject({ name: 'AccessDenied' });
    expect(await runAs('sweeper', get)).toMatchObject({ name: 'NoSuchKey' });
  });

  it('lets the scheduler tell a missing payload from a denied one, so it fails that step only (R5)', async () => {
    // On AWS a GET of a missing object is 403 unless the caller may list the bucket; the tick would
    // then fail the whole pass on every retry instead of failing the one step whose payload is gone.
    const missing = mintRequestId(Date.now());
    let reads: PayloadReads | undefined;
    const read = async () => {
      reads = await readPayloads(awsClients().s3, config().bucket, [missing]);
    };
    expect(await runAs('scheduler', read)).toBe('allowed');
    expect(reads?.unreadable).toEqual([missing]);
  });

  it('limits queues to the granted actions', async () => {
    const send = () =>
      awsClients().sqs.send(new SendMessageCommand({ QueueUrl: config().workQueueUrl, MessageBody: '{}' }));
    const depth = async () => {
      const answer = await cloud.clients.sqs.send(
        new GetQueueAttributesCommand({
          QueueUrl: cloud.names.queueUrls.work,
          AttributeNames: ['ApproximateNumberOfMessages'],
        }),
      );
      return Number(answer.Attributes?.ApproximateNumberOfMessages);
    };
    // The API reads the work queue's depth and never sends work.
    const denied = await runAs('api', send);
    expect(denied).toMatchObject({ name: 'AccessDeniedException' });
    expect((denied as Exclude<Outcome, 'allowed'>).message).toContain('sqs:SendMessage');
    expect(await depth()).toBe(0);
    const readDepth = () =>
      awsClients().sqs.send(
        new GetQueueAttributesCommand({
          QueueUrl: config().workQueueUrl,
          AttributeNames: ['ApproximateNumberOfMessages'],
        }),
      );
    expect(await runAs('api', readDepth)).toBe('allowed');
    expect(await runAs('scheduler', send)).toBe('allowed');
    expect(await depth()).toBe(1);
  });

  it('checks a worker process loop (runtime.runAs) against the worker grants, as its host policy', async () => {
    const receive = () =>
      awsClients().sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: config().workQueueUrl,
          WaitTimeSeconds: 0,
          VisibilityTimeout: 0,
        }),
      );
    const send = () =>
      awsClients().sqs.send(new SendMessageCommand({ QueueUrl: config().workQueueUrl, MessageBody: '{}' }));
    expect(await probes.runAsProcess('worker', receive)).toHaveProperty('value');
    const denied = await probes.runAsProcess('worker', send);
    expect(denied).toMatchObject({ name: 'AccessDeniedException' });
    expect((denied as Exclude<Outcome, 'allowed'>).message).toContain('local-worker');
    // Its environment is the worker's too: the dead-letter queues' URLs are the api's, not its.
    const dlqUrl = async () => config().queueUrl('workDlq');
    expect(await probes.runAsProcess('worker', dlqUrl)).toMatchObject({
      name: 'ConfigError',
      message: 'Missing required environment variable WORK_DLQ_URL',
    });
    expect(await probes.runAsProcess('api', dlqUrl)).toEqual({ value: cloud.names.queueUrls.workDlq });
  });

  it('does not check calls made outside any function (the runtime, test set-up)', async () => {
    await awsClients().doc.send(
      new PutCommand({ TableName: config().table('prefixes'), Item: { pk: 'probe#outside' } }),
    );
    expect(await readPrefixRow('probe#outside')).toEqual({ pk: 'probe#outside' });
  });
});
