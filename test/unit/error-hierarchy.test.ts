import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { InvocationTimeoutError } from '../../local/runtime/triggers/invoker.js';
import { ConditionLostError, InfrastructureError, TinkerError } from '../../shared/base/errors.js';
import { FutureFailedError, TinkerHttpError } from '../../shared/client/tinker-client.js';
import { BatchWriteStoppedError } from '../../shared/repositories/prefix/batch-write.js';
import { TruncatedInputError } from '../../shared/repositories/prefix/codec/varint.js';
import { ReadBatchError } from '../../shared/repositories/prefix/read-batcher.js';
import { AbandonedError } from '../../shared/services/worker/context.js';
import { LeaseLostError, SampleClaimLostError } from '../../shared/services/worker/lease.js';
import { MalformedPayloadError } from '../../shared/services/worker/step-payloads.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

function sources(dir: string): string[] {
  return readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((entry) => {
    const relative = `${dir}/${entry.name}`;
    if (entry.isDirectory()) return sources(relative);
    return entry.name.endsWith('.ts') ? [relative] : [];
  });
}

describe('the one error hierarchy', () => {
  it('has no error class in shared/, functions/ or local/ outside it', () => {
    const outside = ['shared', 'functions', 'local']
      .flatMap(sources)
      .filter((file) => file !== 'shared/base/errors.ts')
      .flatMap((file) =>
        [...readFileSync(path.join(ROOT, file), 'utf8').matchAll(/class (\w+) extends Error\b/g)].map(
          (match) => `${file}: ${match[1]}`,
        ),
      );
    expect(outside).toEqual([]);
  });

  it('keeps each class its name and its instanceof checks, with its context', () => {
    const cases: [Error, string, abstract new (...args: never[]) => Error, Record<string, unknown>][] = [
      [new LeaseLostError('m@3'), 'LeaseLostError', ConditionLostError, { inflight: 'm@3' }],
      [new SampleClaimLostError('r1'), 'SampleClaimLostError', ConditionLostError, { request_id: 'r1' }],
      [new AbandonedError(), 'AbandonedError', InfrastructureError, {}],
      [
        new MalformedPayloadError('r2', 'no steps'),
        'MalformedPayloadError',
        TinkerError,
        { request_id: 'r2' },
      ],
      [new TruncatedInputError('input ended'), 'TruncatedInputError', InfrastructureError, {}],
      [new ReadBatchError('read failed'), 'ReadBatchError', InfrastructureError, {}],
      [
        new BatchWriteStoppedError('deadline', 'stopped'),
        'BatchWriteStoppedError',
        InfrastructureError,
        { reason: 'deadline' },
      ],
      [
        new InvocationTimeoutError('api', 29),
        'InvocationTimeoutError',
        InfrastructureError,
        { function_id: 'api', seconds: 29 },
      ],
      [
        new TinkerHttpError(404, { error: 'gone' }, '/x'),
        'TinkerHttpError',
        TinkerError,
        { path: '/x', status: 404 },
      ],
      [
        new FutureFailedError('r3', 'user', 'bad'),
        'FutureFailedError',
        TinkerError,
        { request_id: 'r3', category: 'user' },
      ],
    ];
    for (const [error, name, base, context] of cases) {
      expect(error.name).toBe(name);
      expect(error).toBeInstanceOf(TinkerError);
      expect(error).toBeInstanceOf(base);
      expect((error as TinkerError).context).toEqual(context);
      expect(String(error)).toBe(`${name}: ${error.message}`);
    }
    // A lost lease is not a lost sample claim: the worker tells them apart by class.
    expect(new LeaseLostError('m@3')).not.toBeInstanceOf(SampleClaimLostError);
  });

  it('carries the cause and keeps the messages and fields callers read', () => {
    const cause = new Error('throttled');
    const stopped = new BatchWriteStoppedError('write-failed', 'batch write failed', { cause });
    expect(stopped.cause).toBe(cause);
    expect(stopped.reason).toBe('write-failed');
    expect(new ReadBatchError('read failed', { cause }).cause).toBe(cause);

    const http = new TinkerHttpError(429, { error: 'slow down' }, '/api/v1/sample');
    expect(http.message).toBe('/api/v1/sample answered 429: slow down');
    expect([http.status, http.category]).toEqual([429, 'user']);
    expect(new TinkerHttpError(503, 'busy', '/healthz').category).toBe('server');

    const failed = new FutureFailedError('r4', 'server', 'failed after 3 attempts');
    expect(failed.message).toBe('request r4 failed (server): failed after 3 attempts');
    expect(failed.category).toBe('server');
    // Only the server's own two words are categories; anything else is reported as the server's.
    const odd = new FutureFailedError('r5', 'unknown', 'no category');
    expect([odd.category, odd.message]).toEqual(['server', 'request r5 failed (unknown): no category']);
  });
});
