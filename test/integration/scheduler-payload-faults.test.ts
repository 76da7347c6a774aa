import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { localAwsClients } from '../../local/cloud/aws-clients.js';
import type { AwsClients } from '../../shared/aws/clients.js';
import { mintRequestId } from '../../shared/base/ids.js';
import { PayloadBytes } from '../../shared/base/payload-bytes.js';
import { putPayload, readPayloads, serializePayload } from '../../shared/repositories/payloads.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { serverError } from '../support/faults/errors.js';

/**
 * The tick's payload reads under transient S3 errors (regression, found by the chaos run): one failed
 * GET failed the whole tick, so every model the tick had claimed sat idle until its lease ended and
 * was charged an attempt. With a backlog, ticks read hundreds of payloads, and the chaos run saw
 * models exhaust their attempts (E2 server errors) on payload reads alone.
 */

describe('payload reads under transient S3 errors', () => {
  let cloud: TestCloud;
  let faulty: AwsClients;
  /** GetObject calls to fail before the next ones go through. */
  let failNext = 0;
  let getObjects = 0;

  beforeAll(async () => {
    cloud = await setupTestCloud();
    cloud.applyEnv();
    faulty = localAwsClients(cloud.endpoints);
    faulty.s3.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'GetObjectCommand') {
          getObjects++;
          if (failNext > 0) {
            failNext--;
            throw serverError('s3', 'GetObject');
          }
        }
        return next(args);
      },
      { step: 'initialize', name: 'failGetObject' },
    );
  });
  afterAll(() => {
    for (const client of [faulty?.dynamo, faulty?.s3, faulty?.sqs]) client?.destroy();
  });

  async function storedPayloads(count: number): Promise<Map<string, unknown>> {
    const payloads = new Map<string, unknown>();
    for (let index = 0; index < count; index++) {
      const requestId = mintRequestId(Date.now());
      const payload = { request_type: 'optim_step', seq_id: index + 1, adam_params: { learning_rate: 0.01 } };
      await putPayload(cloud.clients.s3, cloud.names.bucket, requestId, serializePayload(payload));
      payloads.set(requestId, payload);
    }
    return payloads;
  }

  it('a GET that fails with a transient error is tried again: the tick reads every payload', async () => {
    const payloads = await storedPayloads(4);
    failNext = 2;
    getObjects = 0;
    const reads = await readPayloads(faulty.s3, cloud.names.bucket, [...payloads.keys()]);
    expect(failNext).toBe(0);
    expect(getObjects).toBe(6);
    expect(reads.unreadable).toEqual([]);
    // The bytes as stored, undecoded (the worker decodes them).
    const read = new Map(
      [...reads.payloads].map(([id, bytes]) => [
        id,
        JSON.parse(new TextDecoder().decode((bytes as PayloadBytes).bytes)) as unknown,
      ]),
    );
    expect([...reads.payloads.values()].every((bytes) => bytes instanceof PayloadBytes)).toBe(true);
    expect(read).toEqual(payloads);
  });

  it('an error that persists still fails the read; a missing object is still unreadable', async () => {
    const [requestId] = [...(await storedPayloads(1)).keys()];
    failNext = 10;
    await expect(readPayloads(faulty.s3, cloud.names.bucket, [requestId as string])).rejects.toMatchObject({
      name: 'InternalError',
    });
    failNext = 0;
    const missing = mintRequestId(Date.now());
    const reads = await readPayloads(faulty.s3, cloud.names.bucket, [missing]);
    expect(reads.unreadable).toEqual([missing]);
  });
});
