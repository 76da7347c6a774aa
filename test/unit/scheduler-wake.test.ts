import { marshall } from '@aws-sdk/util-dynamodb';
import type { AttributeValue, DynamoDBRecord } from 'aws-lambda';
import { describe, expect, it } from 'vitest';
import {
  MAX_WOKEN_MODELS,
  WAKE_ALL,
  type WakeScope,
  wakeModels,
  wokenBy,
} from '../../shared/services/scheduler/wake.js';

function futureRecord(image: Record<string, unknown>): DynamoDBRecord {
  return {
    eventName: 'INSERT',
    dynamodb: {
      Keys: { request_id: { S: String(image.request_id) } },
      NewImage: marshall(image) as Record<string, AttributeValue>,
      SequenceNumber: String(image.request_id),
    },
  };
}

function modelRecord(modelId: string): DynamoDBRecord {
  return {
    eventName: 'MODIFY',
    dynamodb: {
      Keys: { model_id: { S: modelId } },
      NewImage: marshall({ model_id: modelId, epoch: 4 }) as Record<string, AttributeValue>,
      OldImage: marshall({ model_id: modelId, epoch: 4, inflight: `${modelId}@4` }) as Record<
        string,
        AttributeValue
      >,
      SequenceNumber: `m-${modelId}`,
    },
  };
}

const pending = { status: 'pending', live: 'default#2', tenant: 't' };

function modelsOf(scope: WakeScope): string[] | 'all' {
  return scope.kind === 'all' ? 'all' : [...scope.modelIds].sort();
}

describe('wokenBy: the models a stream batch names (R5)', () => {
  it('names each futures record by its new image model_id and each models record by its key, once', () => {
    const scope = wokenBy([
      futureRecord({ ...pending, request_id: 'r1', model_id: 'a', seq: 2, request_type: 'forward' }),
      futureRecord({ ...pending, request_id: 'r2', model_id: 'a', seq: 3, request_type: 'optim_step' }),
      futureRecord({
        ...pending,
        request_id: 'r3',
        model_id: 'base:reference/byte-lm',
        request_type: 'sample',
      }),
      futureRecord({
        ...pending,
        request_id: 'r4',
        model_id: 'c',
        request_type: 'sample',
        checkpoint_id: 'k',
      }),
      modelRecord('b'),
    ]);
    // A base-model pool key is a model like any other: its pending samples are read by that id.
    expect(modelsOf(scope)).toEqual(['a', 'b', 'base:reference/byte-lm', 'c']);
  });

  it('takes the full look for a batch with any record that names no model', () => {
    const drainLifted: DynamoDBRecord = {
      eventName: 'REMOVE',
      dynamodb: { Keys: { pk: { S: 'drain#default' } }, SequenceNumber: '9' },
    };
    const noImage: DynamoDBRecord = {
      eventName: 'INSERT',
      dynamodb: { Keys: { request_id: { S: 'r9' } }, SequenceNumber: '10' },
    };
    const noModel = futureRecord({ ...pending, request_id: 'r8', request_type: 'forward', seq: 1 });
    const noKeys: DynamoDBRecord = { eventName: 'MODIFY', dynamodb: { SequenceNumber: '11' } };
    for (const odd of [drainLifted, noImage, noModel, noKeys]) {
      expect(wokenBy([modelRecord('a'), odd])).toEqual(WAKE_ALL);
    }
    expect(wokenBy([])).toEqual(WAKE_ALL);
  });

  it('takes the full look above MAX_WOKEN_MODELS models, and reads each model once up to it', () => {
    const ids = Array.from({ length: MAX_WOKEN_MODELS + 1 }, (_, n) => `m${n}`);
    expect(wokenBy(ids.map(modelRecord))).toEqual(WAKE_ALL);
    const atLimit = wokenBy([...ids.slice(0, MAX_WOKEN_MODELS).map(modelRecord), modelRecord('m0')]);
    expect(modelsOf(atLimit)).toHaveLength(MAX_WOKEN_MODELS);
  });
});

describe('wakeModels', () => {
  it('an empty set of models is the full look, never an empty read', () => {
    expect(wakeModels([])).toEqual(WAKE_ALL);
    expect(modelsOf(wakeModels(['b', 'a', 'b']))).toEqual(['a', 'b']);
  });
});
