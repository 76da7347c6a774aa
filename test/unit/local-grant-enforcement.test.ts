import { DynamoDBClient, PutItemCommand } from '@aws-sdk/client-dynamodb';
import { PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { DynamoDBDocumentClient, PutCommand } from '@aws-sdk/lib-dynamodb';
import { afterEach, beforeEach, describe, expect, it, type MockInstance, vi } from 'vitest';
import { AccessPolicy, enforceGrantsOn, runAsFunction } from '../../local/runtime/grant-enforcement.js';
import { resourceIndex } from '../../local/runtime/iam-requests.js';
import type { AwsClients } from '../../shared/aws/clients.js';
import { logger } from '../../shared/base/logger.js';
import { topology } from '../../shared/base/topology.js';
import { localEnvFixture } from '../support/local-env-fixture.js';

/**
 * The enforcement middleware on clients whose transport only counts what reaches it: a denied call
 * must fail before any request is sent; an allowed one, or one made outside a function, goes out.
 */

const { env } = localEnvFixture();
const access = new AccessPolicy(topology, resourceIndex(topology, env));

class Sent extends Error {
  override name = 'Sent';
}

let sent = 0;
const clients: AwsClients[] = [];

function countingClients(): AwsClients {
  const common = {
    region: 'us-east-1',
    credentials: { accessKeyId: 'x', secretAccessKey: 'x' },
    endpoint: 'http://127.0.0.1:1',
    maxAttempts: 1,
    requestHandler: {
      handle: async () => {
        sent++;
        throw new Sent('reached the transport');
      },
    },
  };
  const dynamo = new DynamoDBClient(common);
  const made: AwsClients = {
    dynamo,
    doc: DynamoDBDocumentClient.from(dynamo),
    s3: new S3Client({ ...common, forcePathStyle: true }),
    sqs: new SQSClient(common),
  };
  enforceGrantsOn(made);
  clients.push(made);
  return made;
}

/** Denials are logged as well as thrown; captured here, so the test output stays quiet. */
let warnings: MockInstance<typeof logger.warn>;
beforeEach(() => {
  warnings = vi.spyOn(logger, 'warn').mockImplementation(() => undefined);
});

afterEach(() => {
  warnings.mockRestore();
  for (const made of clients.splice(0))
    for (const client of [made.dynamo, made.s3, made.sqs]) client.destroy();
  sent = 0;
});

describe('grant enforcement middleware', () => {
  it('fails a call the function is not granted before any request is sent, naming function, action and resource', async () => {
    const { doc } = countingClients();
    const put = () => doc.send(new PutCommand({ TableName: 'p-prefixes', Item: { pk: 'x' } }));
    const denied = await runAsFunction({ functionId: 'api', access }, put).catch((error: unknown) => error);
    expect(denied).toBeInstanceOf(Error);
    expect((denied as Error).name).toBe('AccessDeniedException');
    expect((denied as Error).message).toMatch(
      /local-api is not authorized to perform: dynamodb:PutItem on resource: arn:aws:dynamodb:us-east-1:000000000000:table\/p-prefixes/,
    );
    expect(sent).toBe(0);
    expect(warnings).toHaveBeenCalledWith('local runtime: call denied by the function grants', {
      function: 'api',
      action: 'dynamodb:PutItem',
      resource: 'arn:aws:dynamodb:us-east-1:000000000000:table/p-prefixes',
    });
  });

  it('lets a granted call, and any call outside a function scope, reach the transport', async () => {
    const { doc } = countingClients();
    const put = () => doc.send(new PutCommand({ TableName: 'p-prefixes', Item: { pk: 'x' } }));
    await expect(runAsFunction({ functionId: 'worker', access }, put)).rejects.toThrow(Sent);
    await expect(put()).rejects.toThrow(Sent);
    // A scope without a policy (enforcement off) checks nothing either.
    await expect(runAsFunction({ functionId: 'api' }, put)).rejects.toThrow(Sent);
    expect(sent).toBe(3);
  });

  it('checks the key a document-client call names against the keyed grants, before anything is sent', async () => {
    const { doc, dynamo } = countingClients();
    const putKey = (pk: string) => () =>
      doc.send(new PutCommand({ TableName: 'p-registry', Item: { pk, tenant: 'victim', created_at: 1 } }));
    const minted = await runAsFunction({ functionId: 'worker', access }, putKey('key#forged')).catch(
      (error: unknown) => error,
    );
    expect(minted).toMatchObject({ name: 'AccessDeniedException' });
    expect((minted as Error).message).toContain('dynamodb:PutItem on resource: arn:aws:dynamodb:');
    await expect(
      runAsFunction({ functionId: 'worker', access }, putKey('opkey#forged')),
    ).rejects.toMatchObject({ name: 'AccessDeniedException' });
    expect(sent).toBe(0);
    // The same put of a record the worker owns goes out; so does a low-level client's, keyed `{ S }`.
    await expect(runAsFunction({ functionId: 'worker', access }, putKey('ss#s1'))).rejects.toThrow(Sent);
    const lowLevel = () =>
      dynamo.send(new PutItemCommand({ TableName: 'p-registry', Item: { pk: { S: 'ss#s2' } } }));
    await expect(runAsFunction({ functionId: 'worker', access }, lowLevel)).rejects.toThrow(Sent);
    const lowLevelKey = () =>
      dynamo.send(new PutItemCommand({ TableName: 'p-registry', Item: { pk: { S: 'key#forged' } } }));
    await expect(runAsFunction({ functionId: 'worker', access }, lowLevelKey)).rejects.toMatchObject({
      name: 'AccessDeniedException',
    });
    expect(sent).toBe(2);
  });

  it('answers S3 with AccessDenied and SQS with AccessDeniedException', async () => {
    const { s3, sqs } = countingClients();
    const putWork = () => s3.send(new PutObjectCommand({ Bucket: 'p-data', Key: 'work/w', Body: 'x' }));
    await expect(runAsFunction({ functionId: 'api', access }, putWork)).rejects.toMatchObject({
      name: 'AccessDenied',
      $metadata: { httpStatusCode: 403 },
    });
    const send = () => sqs.send(new SendMessageCommand({ QueueUrl: env.WORK_QUEUE_URL, MessageBody: '{}' }));
    await expect(runAsFunction({ functionId: 'worker', access }, send)).rejects.toMatchObject({
      name: 'AccessDeniedException',
    });
    expect(sent).toBe(0);
    await expect(runAsFunction({ functionId: 'scheduler', access }, putWork)).rejects.toThrow(Sent);
    await expect(runAsFunction({ functionId: 'scheduler', access }, send)).rejects.toThrow(Sent);
    expect(sent).toBe(2);
  });

  it('follows the scope through awaits and timers started by the handler', async () => {
    const { doc } = countingClients();
    const later = () =>
      new Promise((resolve, reject) => {
        setTimeout(() => {
          doc.send(new PutCommand({ TableName: 'p-prefixes', Item: { pk: 'x' } })).then(resolve, reject);
        }, 5);
      });
    await expect(runAsFunction({ functionId: 'api', access }, later)).rejects.toMatchObject({
      name: 'AccessDeniedException',
    });
    expect(sent).toBe(0);
  });
});
