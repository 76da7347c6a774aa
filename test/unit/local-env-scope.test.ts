import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { functionEnv, installConfigScope } from '../../local/runtime/env-scope.js';
import { AccessPolicy, runAsFunction } from '../../local/runtime/grant-enforcement.js';
import { resourceIndex } from '../../local/runtime/iam-requests.js';
import { config, resetConfig, setConfigScope } from '../../shared/base/config.js';
import { ConfigError } from '../../shared/base/errors.js';
import { logger } from '../../shared/base/logger.js';
import { type FunctionId, topology } from '../../shared/base/topology.js';
import { localEnvFixture } from '../support/local-env-fixture.js';

/**
 * The local runtime's environment scope: inside a function, `config()` sees only the resource
 * variables that function's grants give it on AWS; outside one, the whole process environment.
 */

const env: Record<string, string> = {
  ...localEnvFixture().env,
  POOL: 'pool-a',
  LIVE_SHARDS: '3',
  LONG_POLL_SECONDS: '7',
};
const access = new AccessPolicy(topology, resourceIndex(topology, env));
const saved = new Map<string, string | undefined>();

function as<T>(functionId: FunctionId, run: () => T): T {
  return runAsFunction({ functionId, access }, run);
}

function thrown(read: () => unknown): unknown {
  try {
    read();
  } catch (error) {
    return error;
  }
  throw new Error('expected the read to throw');
}

/** Hidden reads are logged as well as thrown; captured, so the test output stays quiet. */
const warnings = vi.spyOn(logger, 'warn').mockImplementation(() => undefined);

beforeAll(() => {
  for (const [name, value] of Object.entries(env)) {
    saved.set(name, process.env[name]);
    process.env[name] = value;
  }
  resetConfig();
  installConfigScope();
});

afterAll(() => {
  warnings.mockRestore();
  setConfigScope(undefined);
  for (const [name, value] of saved) {
    if (value === undefined) delete process.env[name];
    else process.env[name] = value;
  }
  resetConfig();
});

describe('local environment scope', () => {
  it('hides the prefixes table from the scheduler, which is not granted it, naming the variable', () => {
    const error = as('scheduler', () => thrown(() => config().table('prefixes')));
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as Error).message).toMatch(/PREFIXES_TABLE/);
    // What it is granted, and every non-resource variable, it sees as before.
    expect(as('scheduler', () => config().table('futures'))).toBe('p-futures');
    expect(as('scheduler', () => config().workQueueUrl)).toBe(env.WORK_QUEUE_URL);
    expect(
      as('scheduler', () => [config().pool, config().liveShards, config().tunables.longPollSeconds]),
    ).toEqual(['pool-a', 3, 7]);
  });

  it('gives the worker the prefixes table, and the dead-letter queues to the api alone', () => {
    expect(as('worker', () => config().table('prefixes'))).toBe('p-prefixes');
    expect((as('worker', () => thrown(() => config().queueUrl('workDlq'))) as Error).message).toMatch(
      /WORK_DLQ_URL/,
    );
    expect(as('api', () => config().queueUrl('streamDlq'))).toBe(env.STREAM_DLQ_URL);
    expect((as('api', () => thrown(() => config().table('prefixes'))) as Error).message).toMatch(
      /PREFIXES_TABLE/,
    );
  });

  it('keeps the scope across awaits, as a handler sees it for its whole invocation', async () => {
    const read = as('scheduler', async () => {
      await new Promise((resolve) => setTimeout(resolve, 1));
      return thrown(() => config().table('prefixes'));
    });
    expect(await read).toBeInstanceOf(ConfigError);
  });

  it('shows everything outside any function, and inside a scope without a policy', () => {
    expect(config().table('prefixes')).toBe('p-prefixes');
    expect(config().queueUrl('workDlq')).toBe(env.WORK_DLQ_URL);
    expect(runAsFunction({ functionId: 'scheduler' }, () => config().table('prefixes'))).toBe('p-prefixes');
  });

  it('reads the environment again after resetConfig', () => {
    expect(as('worker', () => config().tunables.longPollSeconds)).toBe(7);
    process.env.LONG_POLL_SECONDS = '9';
    resetConfig();
    try {
      expect(as('worker', () => config().tunables.longPollSeconds)).toBe(9);
    } finally {
      process.env.LONG_POLL_SECONDS = env.LONG_POLL_SECONDS;
      resetConfig();
    }
  });
});

describe('functionEnv', () => {
  it('is the source without the resource variables of the resources the function is not granted', () => {
    const source = { ...env, AWS_REGION: 'us-east-1', POWERTOOLS_SERVICE_NAME: 'x' };
    const scheduler = functionEnv(topology, 'scheduler', source);
    expect(Object.keys(scheduler).sort()).toEqual(
      Object.keys(source)
        .filter((name) => !['PREFIXES_TABLE', 'WORK_DLQ_URL', 'STREAM_DLQ_URL'].includes(name))
        .sort(),
    );
    expect('PREFIXES_TABLE' in scheduler).toBe(false);
    expect({ ...scheduler }).not.toHaveProperty('PREFIXES_TABLE');
    expect(scheduler.AWS_REGION).toBe('us-east-1');
  });
});
