import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { describe, expect, it } from 'vitest';
import { NotFoundError } from '../../shared/base/errors.js';
import { registryKey, type SamplingSessionRecord } from '../../shared/domain/records.js';
import { SamplingSessionCache } from '../../shared/services/api/sampling-session-cache.js';

/** A registry of sampling session records that counts its reads. */
function registry(records: readonly SamplingSessionRecord[]) {
  const byKey = new Map(records.map((record) => [record.pk, record]));
  const reads: string[] = [];
  const doc = {
    send: async (command: { input: { Key: { pk: string } } }) => {
      reads.push(command.input.Key.pk);
      return { Item: byKey.get(command.input.Key.pk) };
    },
  } as unknown as DynamoDBDocumentClient;
  return { doc, reads };
}

const record = (id: string, tenant: string): SamplingSessionRecord => ({
  pk: registryKey.samplingSession(id),
  sampling_session_id: id,
  tenant,
  session_id: 's',
  model_id: 'm',
  base_model: 'b',
  created_at: 1,
});

describe('sampling session records kept by the api container', () => {
  it('a record is read once for every later submit on it', async () => {
    const { doc, reads } = registry([record('ss-1', 'acme')]);
    const cache = new SamplingSessionCache();
    for (let n = 0; n < 5; n++)
      expect(await cache.require(doc, 'reg', 'ss-1', 'acme')).toEqual(record('ss-1', 'acme'));
    expect(reads).toHaveLength(1);
  });

  it("another tenant's id answers as unknown, cached or not (C6); unknown ids are never kept", async () => {
    const { doc, reads } = registry([record('ss-1', 'acme')]);
    const cache = new SamplingSessionCache();
    await expect(cache.require(doc, 'reg', 'ss-1', 'zeta')).rejects.toBeInstanceOf(NotFoundError);
    await cache.require(doc, 'reg', 'ss-1', 'acme');
    await expect(cache.require(doc, 'reg', 'ss-1', 'zeta')).rejects.toBeInstanceOf(NotFoundError);
    await expect(cache.require(doc, 'reg', 'ss-2', 'acme')).rejects.toBeInstanceOf(NotFoundError);
    await expect(cache.require(doc, 'reg', 'ss-2', 'acme')).rejects.toBeInstanceOf(NotFoundError);
    expect(cache.size).toBe(1);
    expect(reads).toHaveLength(5);
  });

  it('keeps at most its bound, the oldest going first', async () => {
    const { doc, reads } = registry([record('a', 't'), record('b', 't'), record('c', 't')]);
    const cache = new SamplingSessionCache(2);
    for (const id of ['a', 'b', 'c', 'c', 'b', 'a']) await cache.require(doc, 'reg', id, 't');
    expect(cache.size).toBe(2);
    expect(reads.map((pk) => pk.slice(-1))).toEqual(['a', 'b', 'c', 'a']);
  });
});
