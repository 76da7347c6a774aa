import { describe, expect, it } from 'vitest';
import { createTableInputs, envFor, resourceNames } from '../../local/cloud/resources.js';
import { failedItems } from '../../local/runtime/triggers/batch-response.js';
import {
  LANE_QUEUE_IDS,
  LIVE_BY_MODEL_INDEX,
  LIVE_BY_MODEL_PROJECTION,
  LIVE_INDEX,
  LIVE_PROJECTION,
  type QueueId,
  type Topology,
  topology,
} from '../../shared/base/topology.js';

describe('createTableInputs', () => {
  const inputs = createTableInputs(topology, 'px');

  it('declares every table on demand, under the prefix, with its stream', () => {
    expect(inputs.map((input) => input.TableName)).toEqual([
      'px-futures',
      'px-models',
      'px-registry',
      'px-prefixes',
    ]);
    expect(inputs.every((input) => input.BillingMode === 'PAY_PER_REQUEST')).toBe(true);
    const futures = inputs[0];
    expect(futures?.StreamSpecification).toEqual({ StreamEnabled: true, StreamViewType: 'NEW_IMAGE' });
    // The registry streams keys only, for the scheduler's drain-lifted trigger.
    expect(inputs[2]?.StreamSpecification).toEqual({ StreamEnabled: true, StreamViewType: 'KEYS_ONLY' });
    expect(inputs[3]?.StreamSpecification).toBeUndefined();
  });

  it('defines each key attribute once and projects both live indexes as declared', () => {
    const futures = inputs[0];
    expect(futures?.AttributeDefinitions).toEqual([
      { AttributeName: 'request_id', AttributeType: 'S' },
      { AttributeName: 'live', AttributeType: 'S' },
      { AttributeName: 'model_id', AttributeType: 'S' },
    ]);
    expect(futures?.GlobalSecondaryIndexes).toEqual([
      {
        IndexName: LIVE_INDEX,
        KeySchema: [
          { AttributeName: 'live', KeyType: 'HASH' },
          { AttributeName: 'request_id', KeyType: 'RANGE' },
        ],
        Projection: { ProjectionType: 'INCLUDE', NonKeyAttributes: [...LIVE_PROJECTION] },
      },
      {
        IndexName: LIVE_BY_MODEL_INDEX,
        KeySchema: [
          { AttributeName: 'model_id', KeyType: 'HASH' },
          { AttributeName: 'live', KeyType: 'RANGE' },
        ],
        Projection: { ProjectionType: 'INCLUDE', NonKeyAttributes: [...LIVE_BY_MODEL_PROJECTION] },
      },
    ]);
  });

  it('follows a changed topology (what the CDK drift test relies on)', () => {
    const changed: Topology = {
      ...topology,
      tables: {
        ...topology.tables,
        models: { ...topology.tables.models, sortKey: { name: 'v', type: 'N' } },
      },
    };
    const models = createTableInputs(changed, 'px')[1];
    expect(models?.KeySchema).toEqual([
      { AttributeName: 'model_id', KeyType: 'HASH' },
      { AttributeName: 'v', KeyType: 'RANGE' },
    ]);
    expect(models?.AttributeDefinitions).toContainEqual({ AttributeName: 'v', AttributeType: 'N' });
  });
});

describe('envFor', () => {
  const names = resourceNames(topology, 'px');
  const queueUrls = {
    work: 'http://q/work',
    workDlq: 'http://q/dlq',
    streamDlq: 'http://q/stream-dlq',
    ...Object.fromEntries(LANE_QUEUE_IDS.map((id) => [id, `http://q/${id}`])),
  } as Record<QueueId, string>;
  const endpoints = { dynamodb: 'http://d', s3: 'http://s', sqs: 'http://s' };

  it('names every resource through the topology variables, with settings and endpoints', () => {
    const env = envFor(topology, { ...names, queueUrls }, endpoints);
    expect(env).toMatchObject({
      FUTURES_TABLE: 'px-futures',
      MODELS_TABLE: 'px-models',
      REGISTRY_TABLE: 'px-registry',
      PREFIXES_TABLE: 'px-prefixes',
      DATA_BUCKET: 'px-data',
      WORK_QUEUE_URL: 'http://q/work',
      // The scheduler sends to the lanes, the worker consumes them (S2).
      WORK_LANE_0_QUEUE_URL: 'http://q/lane0',
      WORK_LANE_7_QUEUE_URL: 'http://q/lane7',
      // The api function reads both dead-letter queues' depths for the status page (grant `depth`).
      WORK_DLQ_URL: 'http://q/dlq',
      STREAM_DLQ_URL: 'http://q/stream-dlq',
      POOL: topology.settings.POOL,
      LIVE_SHARDS: topology.settings.LIVE_SHARDS,
      S3_FORCE_PATH_STYLE: 'true',
      AWS_ENDPOINT_URL_DYNAMODB: 'http://d',
      AWS_ENDPOINT_URL_S3: 'http://s',
      AWS_ENDPOINT_URL_SQS: 'http://s',
      AWS_REGION: 'us-east-1',
    });
    expect(env.AWS_ACCESS_KEY_ID).toBeTruthy();
    expect(env.AWS_SECRET_ACCESS_KEY).toBeTruthy();
  });

  it('leaves out the URL of a queue no function is granted, though it declares a variable', () => {
    const withoutDeadLetterReads: Topology = {
      ...topology,
      functions: {
        ...topology.functions,
        api: {
          ...topology.functions.api,
          grants: { ...topology.functions.api.grants, queues: { work: ['depth'], workDlq: [] } },
        },
      },
    };
    const env = envFor(withoutDeadLetterReads, { ...names, queueUrls }, endpoints);
    expect(env.WORK_QUEUE_URL).toBe('http://q/work');
    expect(env).not.toHaveProperty('WORK_DLQ_URL');
    expect(env).not.toHaveProperty('STREAM_DLQ_URL');
    expect(Object.values(env)).not.toContain('http://q/dlq');
    expect(Object.values(env)).not.toContain('http://q/stream-dlq');
  });
});

describe('failedItems (how Lambda reads batchItemFailures)', () => {
  const ids = ['a', 'b', 'c'];
  it('reads success from no answer, an empty list or a null list', () => {
    for (const answer of [undefined, null, {}, { batchItemFailures: [] }, { batchItemFailures: null }]) {
      expect(failedItems(answer, ids)).toEqual(new Set());
    }
  });
  it('returns the reported items', () => {
    expect(failedItems({ batchItemFailures: [{ itemIdentifier: 'b' }] }, ids)).toEqual(new Set(['b']));
  });
  it('fails the whole batch on an empty, missing or unknown identifier', () => {
    expect(failedItems({ batchItemFailures: [{ itemIdentifier: '' }] }, ids)).toBe('all');
    expect(failedItems({ batchItemFailures: [{ id: 'a' }] }, ids)).toBe('all');
    expect(failedItems({ batchItemFailures: [{ itemIdentifier: 'z' }] }, ids)).toBe('all');
    expect(failedItems({ batchItemFailures: 'a' }, ids)).toBe('all');
  });
});
