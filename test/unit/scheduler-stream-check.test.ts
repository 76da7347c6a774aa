import { marshall } from '@aws-sdk/util-dynamodb';
import type { AttributeValue, DynamoDBRecord } from 'aws-lambda';
import { describe, expect, it } from 'vitest';
import type { FutureStatus, ModelRow } from '../../shared/domain/records.js';
import type { SampleRowFacts } from '../../shared/repositories/futures.js';
import {
  pendingFutureRecords,
  recordsToRetry,
  type StreamedRow,
} from '../../shared/services/scheduler/stream-check.js';
import { modelRow } from '../support/scheduling-fixtures.js';

function futureRecord(sequenceNumber: string, image: Record<string, unknown>): DynamoDBRecord {
  return {
    eventName: 'INSERT',
    dynamodb: {
      Keys: { request_id: { S: String(image.request_id) } },
      NewImage: marshall(image) as Record<string, AttributeValue>,
      SequenceNumber: sequenceNumber,
    },
  };
}

const pending = { status: 'pending', live: 'default#1', tenant: 't', payload_key: 'k', payload_digest: 'd' };

describe('pendingFutureRecords', () => {
  it('keeps pending futures rows, with what the check needs, and drops models-stream and terminal records', () => {
    const records: DynamoDBRecord[] = [
      futureRecord('1', { ...pending, request_id: 'r1', model_id: 'a', seq: 3, request_type: 'forward' }),
      futureRecord('2', { ...pending, request_id: 'r2', model_id: 'base:x', request_type: 'sample' }),
      futureRecord('3', {
        request_id: 'r3',
        model_id: 'a',
        seq: 4,
        request_type: 'forward',
        status: 'completed',
      }),
      {
        eventName: 'MODIFY',
        dynamodb: {
          Keys: { model_id: { S: 'a' } },
          NewImage: marshall({ model_id: 'a', epoch: 3 }) as Record<string, AttributeValue>,
          SequenceNumber: '4',
        },
      },
    ];
    expect(pendingFutureRecords(records)).toEqual([
      { sequenceNumber: '1', request_id: 'r1', model_id: 'a', request_type: 'forward', seq: 3 },
      { sequenceNumber: '2', request_id: 'r2', model_id: 'base:x', request_type: 'sample' },
    ]);
  });
});

describe('recordsToRetry (R5)', () => {
  const adapters = (
    models: ModelRow[],
    claimed: string[] = [],
    statuses: Record<string, FutureStatus> = {},
  ) => ({
    readModels: async (ids: Iterable<string>) =>
      new Map(models.filter((m) => [...ids].includes(m.model_id)).map((m) => [m.model_id, m])),
    readSampleClaims: async (ids: Iterable<string>) => new Set([...ids].filter((id) => claimed.includes(id))),
    readSampleRows: async (ids: Iterable<string>) =>
      new Map<string, SampleRowFacts>(
        [...ids]
          .filter((id) => statuses[id] !== undefined)
          .map((id) => [id, { tenant: 't', status: statuses[id]! }]),
      ),
  });
  const training = (n: string, model: string, seq: number): StreamedRow => ({
    sequenceNumber: n,
    request_id: `r${n}`,
    model_id: model,
    request_type: 'forward_backward',
    seq,
  });
  const sample = (n: string): StreamedRow => ({
    sequenceNumber: n,
    request_id: `r${n}`,
    model_id: 'base:x',
    request_type: 'sample',
  });

  it('never retries a row the scan showed, even one still waiting behind a barrier or a model in flight', async () => {
    const rows = [training('1', 'a', 5), sample('2')];
    const retry = await recordsToRetry(
      rows,
      new Set(['r1', 'r2']),
      adapters([modelRow('a')], [], { r2: 'pending' }),
      0,
    );
    expect(retry).toEqual([]);
  });

  it('retries an unseen training row its model has not planned yet, or whose model row is missing', async () => {
    const rows = [training('1', 'a', 3), training('2', 'a', 2), training('3', 'gone', 1)];
    const model = modelRow('a', { planned_through: 2, applied_through: 1, inflight: 'a@4', epoch: 4 });
    expect(await recordsToRetry(rows, new Set(), adapters([model]), 0)).toEqual(['1', '3']);
  });

  it('retries an unseen sample only while it is pending and unclaimed', async () => {
    const rows = [sample('1'), sample('2'), sample('3'), sample('4')];
    const retry = await recordsToRetry(
      rows,
      new Set(),
      adapters([], ['r2'], { r1: 'pending', r2: 'pending', r3: 'completed' }),
      0,
    );
    expect(retry).toEqual(['1']);
  });
});
