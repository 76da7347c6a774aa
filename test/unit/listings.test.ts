import { describe, expect, it } from 'vitest';
import { ValidationError } from '../../shared/base/errors.js';
import { isLiveCheckpoint } from '../../shared/domain/checkpoint-life.js';
import { checkpointListingKeys, listSortKey } from '../../shared/domain/listing-keys.js';
import {
  type CheckpointRow,
  checkpointView,
  latestOfEachKind,
  pageOf,
  stringMetadata,
  trainingRunView,
} from '../../shared/domain/listing-views.js';
import { SDK_TINKER_PATH } from '../../shared/domain/tinker-path.js';
import { choiceParam, integerParam, parseQuery } from '../../shared/services/api/query.js';
import { pageRequest } from '../../shared/services/api/runs.js';
import { seededRandom } from '../support/seeded-random.js';

/** The 400 a bad parameter answers, and the field it names. */
function refusal(run: () => unknown): { status: number; field: unknown } | undefined {
  try {
    run();
    return undefined;
  } catch (error) {
    if (!(error instanceof ValidationError)) throw error;
    return { status: error.status, field: error.context.field };
  }
}

describe('listing sort keys (C1)', () => {
  it('sort as strings exactly as their times sort as numbers, so ScanIndexForward=false is newest first', () => {
    const random = seededRandom(15);
    const times = Array.from({ length: 500 }, () => Math.floor(random() * 2 ** 43));
    times.push(0, 9, 10, 999, 1000, 1_700_000_000_000, 9_999_999_999_999);
    const byKey = [...times].sort((a, b) => (listSortKey(a, 'x') < listSortKey(b, 'x') ? -1 : 1));
    expect(byKey).toEqual([...times].sort((a, b) => a - b));
  });

  it('pad to 13 digits, join the parts with #, and refuse what is not a time in ms', () => {
    expect(listSortKey(1234, 'model-1', 'weights', 'w1')).toBe('0000000001234#model-1#weights#w1');
    expect(listSortKey(1_700_000_000_000)).toBe('1700000000000');
    for (const bad of [-1, 1.5, Number.NaN, 10 ** 13]) expect(() => listSortKey(bad)).toThrow(RangeError);
  });

  it("put a committed checkpoint in its tenant's and its run's partitions", () => {
    expect(checkpointListingKeys({ tenant: 'acme', model_id: 'm1', kind: 'sampler', name: 's' }, 5)).toEqual({
      created_at: 5,
      owner_key: 'ckpt#acme',
      parent_key: 'run#m1',
      list_sort: '0000000000005#m1#sampler#s',
    });
  });
});

describe('live checkpoints (C5)', () => {
  it('are committed and not expired; expires_at absent means never', () => {
    expect(isLiveCheckpoint({ status: 'committed' }, 10)).toBe(true);
    expect(isLiveCheckpoint({ status: 'committed', expires_at: 11 }, 10)).toBe(true);
    expect(isLiveCheckpoint({ status: 'committed', expires_at: 10 }, 10)).toBe(false);
    expect(isLiveCheckpoint({ status: 'pending' }, 10)).toBe(false);
  });
});

describe('offset paging', () => {
  it('serves every item exactly once across pages, with the total in every cursor', () => {
    const all = Array.from({ length: 23 }, (_, i) => i);
    for (const limit of [1, 5, 7, 23, 100]) {
      const seen: number[] = [];
      // The CLI's loop: ask until a short page.
      for (let offset = 0; ; offset += limit) {
        const { items, cursor } = pageOf(all, { limit, offset });
        expect(cursor).toEqual({ offset, limit, total_count: 23 });
        seen.push(...items);
        if (items.length < limit) break;
      }
      expect(seen).toEqual(all);
    }
    expect(pageOf(all, { limit: 5, offset: 40 }).items).toEqual([]);
  });
});

describe('query parameters', () => {
  it('default, accept digits in range, and name the parameter of any bad value in a 400', () => {
    expect(pageRequest(parseQuery(''), 20)).toEqual({ limit: 20, offset: 0 });
    expect(pageRequest(parseQuery('limit=1000&offset=0&project_id=x'), 20)).toEqual({
      limit: 1000,
      offset: 0,
    });
    expect(pageRequest(parseQuery('limit=1&offset=123456'), 20)).toEqual({ limit: 1, offset: 123456 });
    for (const [query, field] of [
      ['limit=0', 'limit'],
      ['limit=1001', 'limit'],
      ['limit=-1', 'limit'],
      ['limit=2.5', 'limit'],
      ['limit=1e2', 'limit'],
      ['limit=+5', 'limit'],
      ['limit=', 'limit'],
      ['limit=ten', 'limit'],
      ['limit=5&limit=6', 'limit'],
      ['offset=-1', 'offset'],
      ['offset=1.0', 'offset'],
      ['offset=99999999999999999999', 'offset'],
      ['offset=%20', 'offset'],
    ] as const) {
      expect(
        refusal(() => pageRequest(parseQuery(query), 20)),
        query,
      ).toEqual({ status: 400, field });
    }
  });

  it('take one of the listed choices', () => {
    const scopes = ['owned', 'accessible'] as const;
    expect(choiceParam(parseQuery(''), 'access_scope', scopes, 'owned')).toBe('owned');
    expect(choiceParam(parseQuery('access_scope=accessible'), 'access_scope', scopes, 'owned')).toBe(
      'accessible',
    );
    for (const query of ['access_scope=all', 'access_scope=Owned', 'access_scope=owned&access_scope=owned']) {
      expect(refusal(() => choiceParam(parseQuery(query), 'access_scope', scopes, 'owned'))).toEqual({
        status: 400,
        field: 'access_scope',
      });
    }
  });

  it('decode percent escapes and keep no prototype keys', () => {
    const query = parseQuery('a=%31&__proto__=1&constructor=2');
    expect(query.a).toEqual(['1']);
    expect(integerParam(query, 'constructor', { min: 0, max: 5, fallback: 0 })).toBe(2);
    expect(integerParam(parseQuery(''), 'toString', { min: 0, max: 5, fallback: 3 })).toBe(3);
  });
});

const row = (kind: CheckpointRow['kind'], name: string, created_at: number, extra = {}): CheckpointRow => ({
  model_id: 'sess:train:0',
  kind,
  name,
  created_at,
  ...extra,
});

describe('answers as the SDK parses them', () => {
  it('a Checkpoint: the id keeps the kind, the path is the SDK form, times are ISO 8601 with Z', () => {
    expect(checkpointView(row('weights', 'w1', Date.UTC(2026, 0, 2, 3, 4, 5, 6)))).toEqual({
      checkpoint_id: 'weights/w1',
      checkpoint_type: 'training',
      time: '2026-01-02T03:04:05.006Z',
      tinker_path: 'tinker://sess:train:0/weights/w1',
      size_bytes: null,
      public: false,
      expires_at: null,
    });
    const sampler = checkpointView(
      row('sampler', 's1', 0, { public: true, size_bytes: 42, expires_at: 60_000 }),
    );
    expect(sampler).toMatchObject({
      checkpoint_id: 'sampler_weights/s1',
      checkpoint_type: 'sampler',
      size_bytes: 42,
      public: true,
      expires_at: '1970-01-01T00:01:00.000Z',
    });
    expect(sampler.tinker_path).toMatch(SDK_TINKER_PATH);
  });

  it('a TrainingRun: metadata values as strings, last request time from the last submit, newest of each kind', () => {
    const rows = [row('sampler', 's2', 30), row('sampler', 's1', 20), row('weights', 'w1', 10)];
    const latest = latestOfEachKind(rows);
    const view = trainingRunView(
      {
        model_id: 'm1',
        tenant: 'acme',
        base_model: 'reference/byte-lm',
        lora_rank: 8,
        created_at: 1,
        last_request_at: 2000,
        user_metadata: { name: 'x', step: 3, nested: { a: [1, true] }, none: null },
      },
      latest,
    );
    expect(view).toMatchObject({
      training_run_id: 'm1',
      model_owner: 'acme',
      is_lora: true,
      corrupted: false,
      lora_rank: 8,
      last_request_time: '1970-01-01T00:00:02.000Z',
      user_metadata: { name: 'x', step: '3', nested: '{"a":[1,true]}', none: 'null' },
    });
    expect(view.last_checkpoint?.checkpoint_id).toBe('weights/w1');
    expect(view.last_sampler_checkpoint?.checkpoint_id).toBe('sampler_weights/s2');
    const bare = trainingRunView(
      { model_id: 'm2', tenant: 'acme', base_model: 'b', lora_rank: 1, created_at: 5 },
      latestOfEachKind([]),
    );
    expect(bare).toMatchObject({
      last_request_time: '1970-01-01T00:00:00.005Z',
      last_checkpoint: null,
      last_sampler_checkpoint: null,
      user_metadata: null,
    });
  });

  it('metadata keys such as __proto__ stay plain keys', () => {
    const metadata = JSON.parse('{"__proto__": 1, "constructor": "c"}') as Record<string, unknown>;
    const strings = stringMetadata(metadata);
    expect(Object.keys(strings).sort()).toEqual(['__proto__', 'constructor']);
    expect(JSON.parse(JSON.stringify(strings))).toEqual({ ['__proto__']: '1', constructor: 'c' });
  });
});
