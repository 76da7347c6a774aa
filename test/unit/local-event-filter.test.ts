import { describe, expect, it } from 'vitest';
import { matchesAnyPattern, matchesPattern } from '../../local/runtime/event-filter.js';
import { type FilterPattern, type Trigger, topology } from '../../shared/base/topology.js';

function streamFilters(index: number): readonly FilterPattern[] {
  const trigger = topology.functions.scheduler.triggers[index] as Extract<Trigger, { kind: 'stream' }>;
  return trigger.filters;
}

describe('matchesPattern', () => {
  it('matches value lists by equality, any of the values, strings and numbers kept apart', () => {
    const pattern: FilterPattern = { eventName: ['INSERT', 'MODIFY'], size: [3] };
    expect(matchesPattern({ eventName: 'MODIFY', size: 3 }, pattern)).toBe(true);
    expect(matchesPattern({ eventName: 'REMOVE', size: 3 }, pattern)).toBe(false);
    expect(matchesPattern({ eventName: 'INSERT', size: '3' }, pattern)).toBe(false);
    expect(matchesPattern({ size: 3 }, pattern)).toBe(false);
  });

  it('treats exists as a test on leaves and a missing path as absent', () => {
    const present: FilterPattern = { a: { b: [{ exists: true }] } };
    const absent: FilterPattern = { a: { b: [{ exists: false }] } };
    expect(matchesPattern({ a: { b: 'x' } }, present)).toBe(true);
    expect(matchesPattern({ a: { b: 0 } }, present)).toBe(true);
    expect(matchesPattern({ a: { b: { c: 1 } } }, present)).toBe(false);
    expect(matchesPattern({ a: {} }, present)).toBe(false);
    expect(matchesPattern({}, present)).toBe(false);
    expect(matchesPattern({ a: {} }, absent)).toBe(true);
    expect(matchesPattern({}, absent)).toBe(true);
    expect(matchesPattern({ a: { b: 'x' } }, absent)).toBe(false);
  });

  it('matches arrays in the event when any element matches', () => {
    expect(matchesPattern({ tags: ['a', 'b'] }, { tags: ['b'] })).toBe(true);
    expect(matchesPattern({ tags: ['a'] }, { tags: ['b'] })).toBe(false);
  });

  it('delivers everything when a trigger has no patterns, and on any matching pattern otherwise', () => {
    expect(matchesAnyPattern({ anything: 1 }, [])).toBe(true);
    expect(matchesAnyPattern({ k: 'b' }, [{ k: ['a'] }, { k: ['b'] }])).toBe(true);
    expect(matchesAnyPattern({ k: 'c' }, [{ k: ['a'] }, { k: ['b'] }])).toBe(false);
  });
});

describe('the topology stream filters', () => {
  it('futures: only rows carrying a live key reach the scheduler', () => {
    const filters = streamFilters(0);
    const live = {
      eventName: 'INSERT',
      dynamodb: { NewImage: { live: { S: 'default#1' }, status: { S: 'pending' } } },
    };
    const terminal = { eventName: 'MODIFY', dynamodb: { NewImage: { status: { S: 'completed' } } } };
    const removed = { eventName: 'REMOVE', dynamodb: { Keys: { request_id: { S: 'r' } } } };
    expect(matchesAnyPattern(live, filters)).toBe(true);
    expect(matchesAnyPattern(terminal, filters)).toBe(false);
    expect(matchesAnyPattern(removed, filters)).toBe(false);
  });

  it('models: only a MODIFY that clears inflight reaches the scheduler', () => {
    const filters = streamFilters(1);
    const cleared = {
      eventName: 'MODIFY',
      dynamodb: { OldImage: { inflight: { S: 'm#3' } }, NewImage: { epoch: { N: '3' } } },
    };
    const claimed = {
      eventName: 'MODIFY',
      dynamodb: { OldImage: { epoch: { N: '2' } }, NewImage: { inflight: { S: 'm#3' } } },
    };
    const renewed = {
      eventName: 'MODIFY',
      dynamodb: { OldImage: { inflight: { S: 'm#3' } }, NewImage: { inflight: { S: 'm#3' } } },
    };
    const inserted = { eventName: 'INSERT', dynamodb: { NewImage: { epoch: { N: '0' } } } };
    expect(matchesAnyPattern(cleared, filters)).toBe(true);
    expect(matchesAnyPattern(claimed, filters)).toBe(false);
    expect(matchesAnyPattern(renewed, filters)).toBe(false);
    expect(matchesAnyPattern(inserted, filters)).toBe(false);
  });
});
