import { describe, expect, it } from 'vitest';
import { type ItemWrite, itemsWritten, mayMatch, TableWrites } from '../../local/runtime/write-wakes.js';
import { registryKey } from '../../shared/base/registry-keys.js';
import { type Trigger, topology } from '../../shared/base/topology.js';

type StreamTrigger = Extract<Trigger, { kind: 'stream' }>;

/** The scheduler's declared stream filters, by table. */
function filtersOn(table: StreamTrigger['table']) {
  const trigger = topology.functions.scheduler.triggers.find(
    (candidate): candidate is StreamTrigger => candidate.kind === 'stream' && candidate.table === table,
  );
  if (trigger === undefined) throw new Error(`the scheduler has no ${table} stream trigger`);
  return trigger.filters;
}

const keyNames = (table: string) =>
  table === 'registry' ? ['pk'] : table === 'prefixes' ? ['pk', 'sk'] : undefined;

describe('the items a DynamoDB write names (local write wake-ups)', () => {
  it('reads item writes, batches and transactions with their kind and key, and no reads', () => {
    expect(itemsWritten('PutItem', { TableName: 'registry', Item: { pk: 'a', n: 1 } }, keyNames)).toEqual([
      {
        table: 'registry',
        events: ['INSERT', 'MODIFY'],
        keys: { pk: { S: 'a' } },
        attributes: { kind: 'replaced', present: { pk: 'S', n: 'N' } },
      },
    ]);
    // The low-level client's attribute values, as the stream carries them.
    expect(itemsWritten('DeleteItem', { TableName: 'registry', Key: { pk: { S: 'b' } } }, keyNames)).toEqual([
      { table: 'registry', events: ['REMOVE'], keys: { pk: { S: 'b' } }, attributes: undefined },
    ]);
    expect(
      itemsWritten('UpdateItem', { TableName: 'prefixes', Key: { pk: 'p', sk: 7 } }, keyNames)[0]?.keys,
    ).toEqual({ pk: { S: 'p' }, sk: { N: '7' } });
    // A table whose key is not known, or a key that is not plain: no key, so any key may match.
    expect(itemsWritten('UpdateItem', { TableName: 'models', Key: { model_id: 'm' } }, keyNames)).toEqual([
      { table: 'models', events: ['INSERT', 'MODIFY'], keys: undefined, attributes: undefined },
    ]);
    expect(
      itemsWritten('DeleteItem', { TableName: 'registry', Key: { pk: Uint8Array.of(1) } }, keyNames)[0]?.keys,
    ).toBeUndefined();
    expect(
      itemsWritten(
        'BatchWriteItem',
        {
          RequestItems: {
            prefixes: [{ PutRequest: { Item: { pk: 'p', sk: 1 } } }],
            registry: [{ DeleteRequest: { Key: { pk: 'c' } } }],
          },
        },
        keyNames,
      ).map(({ table, events }) => [table, events]),
    ).toEqual([
      ['prefixes', ['INSERT', 'MODIFY']],
      ['registry', ['REMOVE']],
    ]);
    expect(
      itemsWritten('TransactWriteItems', {
        TransactItems: [
          { Update: { TableName: 'models', Key: { model_id: 'm' } } },
          { Put: { TableName: 'futures', Item: { request_id: 'r' } } },
          { Delete: { TableName: 'registry', Key: { pk: 'slot' } } },
          // Checks a condition and writes nothing: no stream record.
          { ConditionCheck: { TableName: 'prefixes', Key: { pk: 'p', sk: 1 } } },
        ],
      }).map(({ table, events }) => [table, events]),
    ).toEqual([
      ['models', ['INSERT', 'MODIFY']],
      ['futures', ['INSERT', 'MODIFY']],
      ['registry', ['REMOVE']],
    ]);
    expect(itemsWritten('GetItem', { TableName: 'futures', Key: { request_id: 'r' } })).toEqual([]);
    expect(itemsWritten('Query', { TableName: 'futures' })).toEqual([]);
  });
});

describe('which writes may wake a stream trigger (its declared filters)', () => {
  const registry = filtersOn('registry');
  const drainKey = registryKey.drain(topology.settings.POOL ?? 'default');
  const write = (events: ('INSERT' | 'MODIFY' | 'REMOVE')[], pk?: string): ItemWrite => ({
    table: 'registry',
    events,
    keys: pk === undefined ? undefined : { pk: { S: pk } },
    attributes: undefined,
  });

  it('wakes the registry trigger only for a delete that may be of the drain record', () => {
    expect(mayMatch(write(['REMOVE'], drainKey), registry)).toBe(true);
    // Not plain: it may be the drain record.
    expect(mayMatch(write(['REMOVE']), registry)).toBe(true);
    expect(mayMatch(write(['REMOVE'], 'slot#r1'), registry)).toBe(false);
    // Quota counters, poll slots, the tick lock, a drain being set: puts and updates make no REMOVE.
    expect(mayMatch(write(['INSERT', 'MODIFY'], drainKey), registry)).toBe(false);
    expect(mayMatch(write(['INSERT', 'MODIFY']), registry)).toBe(false);
  });

  it('judges the images only by what the write decides', () => {
    const models = filtersOn('models');
    const futures = filtersOn('futures');
    const one = (operation: string, input: Record<string, unknown>): ItemWrite => {
      const [item] = itemsWritten(operation, input);
      if (item === undefined) throw new Error('no item written');
      return item;
    };
    const updateOf = (table: string, UpdateExpression: string, names?: Record<string, string>) =>
      one('UpdateItem', {
        TableName: table,
        Key: { id: 'x' },
        UpdateExpression,
        ...(names === undefined ? {} : { ExpressionAttributeNames: names }),
        // The values as the document client takes them: strings are stored as S.
        ExpressionAttributeValues: { ':inflight': 'm#2', ':remove': 'm#3', ':live': 'p#0', ':epoch': 2 },
      });
    // A claim sets inflight: it cannot be the MODIFY that clears it (shared/domain/planning/claim.ts).
    const claim =
      'SET epoch = :epoch, inflight = :inflight, lease_until = :lease_until, planned_through = :p';
    expect(mayMatch(updateOf('models', claim), models)).toBe(false);
    // A lease renewal leaves inflight as it was: present before, present after.
    expect(mayMatch(updateOf('models', 'SET lease_until = :until'), models)).toBe(false);
    // A commit or a release removes it.
    expect(
      mayMatch(
        updateOf('models', 'SET state_ref = :s, applied_through = :a REMOVE inflight, lease_until'),
        models,
      ),
    ).toBe(true);
    expect(mayMatch(updateOf('models', 'REMOVE #i', { '#i': 'inflight' }), models)).toBe(true);
    // Removing a path inside an attribute leaves the attribute; deleting from a set may remove it.
    expect(mayMatch(updateOf('models', 'REMOVE inflight.part'), models)).toBe(false);
    expect(mayMatch(updateOf('models', 'DELETE inflight :inflight'), models)).toBe(true);
    // A put replaces the item: without inflight it may be the clearing MODIFY, with it not.
    expect(mayMatch(one('PutItem', { TableName: 'models', Item: { model_id: 'm' } }), models)).toBe(true);
    expect(
      mayMatch(one('PutItem', { TableName: 'models', Item: { model_id: 'm', inflight: 't' } }), models),
    ).toBe(false);

    // The futures trigger wants rows that are live after the write: a commit's REMOVE live is not.
    const settle = 'SET #status = :status, #field = :value, updated_at = :now REMOVE live';
    expect(mayMatch(updateOf('futures', settle, { '#status': 'status', '#field': 'result' }), futures)).toBe(
      false,
    );
    expect(
      mayMatch(updateOf('futures', 'SET live = :live, #s = :pending', { '#s': 'status' }), futures),
    ).toBe(true);
    // Left as it was, a row may be live.
    expect(mayMatch(updateOf('futures', 'SET updated_at = :now'), futures)).toBe(true);
    expect(
      mayMatch(one('PutItem', { TableName: 'futures', Item: { request_id: 'r', live: 'p#0' } }), futures),
    ).toBe(true);
    expect(
      mayMatch(one('PutItem', { TableName: 'futures', Item: { request_id: 'r', live: undefined } }), futures),
    ).toBe(false);
    // Placeholders that spell a keyword are not clauses; an expression not read may match.
    expect(mayMatch(updateOf('models', 'SET inflight = :remove'), models)).toBe(false);
    // A value whose type is not shown, or one stored as another type: may match.
    expect(mayMatch(updateOf('models', 'SET inflight = :unknown'), models)).toBe(true);
    expect(mayMatch(updateOf('models', 'SET inflight = :epoch'), models)).toBe(true);
    expect(mayMatch(one('UpdateItem', { TableName: 'models', Key: { model_id: 'm' } }), models)).toBe(true);
  });

  it('judges nothing else: any put or update may wake the futures and models triggers', () => {
    const put = { events: ['INSERT', 'MODIFY'] as const, keys: undefined, attributes: undefined };
    expect(mayMatch({ table: 'futures', ...put }, filtersOn('futures'))).toBe(true);
    expect(mayMatch({ table: 'models', ...put }, filtersOn('models'))).toBe(true);
    // The models trigger takes MODIFYs only.
    expect(
      mayMatch(
        { table: 'models', events: ['REMOVE'], keys: undefined, attributes: undefined },
        filtersOn('models'),
      ),
    ).toBe(false);
    // No filters: everything.
    expect(
      mayMatch({ table: 'models', events: ['REMOVE'], keys: undefined, attributes: undefined }, []),
    ).toBe(true);
  });

  it('wakes each listener of the written table once per command, when an item may pass its filters', () => {
    const writes = new TableWrites();
    const woken: string[] = [];
    writes.onWrite('registry', () => woken.push('registry'), registry);
    const stop = writes.onWrite('futures', () => woken.push('futures'));
    writes.wrote([write(['INSERT', 'MODIFY'], 'quota#t')]);
    expect(woken).toEqual([]);
    writes.wrote([write(['REMOVE'], drainKey), write(['REMOVE'], drainKey)]);
    expect(woken).toEqual(['registry']);
    const future = {
      table: 'futures',
      events: ['INSERT', 'MODIFY'] as const,
      keys: undefined,
      attributes: undefined,
    };
    writes.wrote([future, future]);
    expect(woken).toEqual(['registry', 'futures']);
    stop();
    writes.wrote([future]);
    expect(woken).toEqual(['registry', 'futures']);
  });
});
