import { execFileSync } from 'node:child_process';
import type { Context } from 'aws-lambda';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createAwsClients } from '../../shared/aws/clients.js';
import { observedHandler } from '../../shared/aws/lambda-handler.js';
import { traceInvocation, tracer } from '../../shared/aws/tracer.js';
import { readConfig } from '../../shared/base/config.js';
import { appendLogKeys, logger, withLogKeys } from '../../shared/base/logger.js';

/** A Lambda context as the runtime passes it (only what the logger reads matters here). */
function lambdaContext(awsRequestId: string): Context {
  return {
    awsRequestId,
    functionName: 'tinker-api',
    functionVersion: '$LATEST',
    invokedFunctionArn: 'arn:aws:lambda:us-east-1:000000000000:function:tinker-api',
    memoryLimitInMB: '1024',
    getRemainingTimeInMillis: () => 30_000,
  } as Context;
}

/** The JSON log lines written while `run` runs (the logger writes warnings and errors to stderr). */
async function logLines(run: () => Promise<unknown>): Promise<Record<string, unknown>[]> {
  const lines: string[] = [];
  const keep = (chunk: string | Uint8Array) => {
    lines.push(String(chunk));
    return true;
  };
  const spies = [
    vi.spyOn(process.stdout, 'write').mockImplementation(keep),
    vi.spyOn(process.stderr, 'write').mockImplementation(keep),
  ];
  try {
    await run();
  } finally {
    for (const spy of spies) spy.mockRestore();
  }
  return lines.map((line) => JSON.parse(line) as Record<string, unknown>);
}

/** A handler that learns its tenant part-way, as the API does after checking the key. */
const handler = observedHandler('test', async (event: { tenant?: string; note: string }) => {
  if (event.tenant !== undefined) appendLogKeys({ tenant: event.tenant, model_id: `model-${event.tenant}` });
  // Across an await, as real handlers log after their reads.
  await new Promise((resolve) => setImmediate(resolve));
  logger.warn(event.note);
  return event.note;
});

afterEach(() => vi.restoreAllMocks());

describe('the logger inside a Lambda invocation', () => {
  it('carries the invocation and the keys appended during it, and none of them into the next one', async () => {
    const lines = await logLines(async () => {
      expect(await handler({ tenant: 'acme', note: 'first' }, lambdaContext('req-1'))).toBe('first');
      await handler({ note: 'second' }, lambdaContext('req-2'));
      logger.warn('between invocations');
    });
    expect(lines).toHaveLength(3);
    expect(lines[0]).toMatchObject({
      message: 'first',
      level: 'WARN',
      service: 'tinker-serverless',
      function_request_id: 'req-1',
      function_name: 'tinker-api',
      function_memory_size: '1024',
      cold_start: true,
      tenant: 'acme',
      model_id: 'model-acme',
    });
    // The warm container's next invocation: its own request id, no cold start, no key of the first.
    expect(lines[1]).toMatchObject({ message: 'second', function_request_id: 'req-2', cold_start: false });
    expect(lines[1]).not.toHaveProperty('tenant');
    expect(lines[1]).not.toHaveProperty('model_id');
    // Outside any invocation: neither the Lambda fields nor any key.
    expect(lines[2]).toMatchObject({ message: 'between invocations' });
    for (const key of ['function_request_id', 'cold_start', 'tenant', 'model_id']) {
      expect(lines[2]).not.toHaveProperty(key);
    }
  });

  it('keeps invocations that run side by side apart (the local runtime runs them in one process)', async () => {
    const lines = await logLines(() =>
      Promise.all([
        handler({ tenant: 'one', note: 'from one' }, lambdaContext('req-a')),
        handler({ tenant: 'two', note: 'from two' }, lambdaContext('req-b')),
      ]),
    );
    const byMessage = new Map(lines.map((line) => [line.message, line]));
    expect(byMessage.get('from one')).toMatchObject({ function_request_id: 'req-a', tenant: 'one' });
    expect(byMessage.get('from two')).toMatchObject({ function_request_id: 'req-b', tenant: 'two' });
  });

  it('logs a nested scope with its keys on top of the invocation, and drops them when it ends', async () => {
    const nested = await logLines(async () => {
      await observedHandler('nested', async () => {
        await withLogKeys({ work_item_id: 'wi-1' }, async () => logger.warn('inside'));
        logger.warn('after');
      })({}, lambdaContext('req-w'));
    });
    expect(nested[0]).toMatchObject({
      message: 'inside',
      work_item_id: 'wi-1',
      function_request_id: 'req-w',
    });
    expect(nested[1]).toMatchObject({ message: 'after', function_request_id: 'req-w' });
    expect(nested[1]).not.toHaveProperty('work_item_id');
  });

  it('runs without a context (tests call handlers so): no Lambda fields, keys still scoped', async () => {
    const lines = await logLines(() => handler({ tenant: 'solo', note: 'no context' }));
    expect(lines[0]).toMatchObject({ message: 'no context', tenant: 'solo' });
    expect(lines[0]).not.toHaveProperty('function_request_id');
  });
});

describe('the tracer', () => {
  it('is off outside Lambda, and the X-Ray SDK (and its hook on every promise) is never loaded', async () => {
    expect(process.env.AWS_EXECUTION_ENV).toBeUndefined();
    expect(await tracer()).toBeUndefined();
    const clients = createAwsClients();
    const answer = await traceInvocation('probe', async () => 'ran');
    expect(answer).toBe('ran');
    expect(clients.dynamo.middlewareStack.identify().join()).not.toMatch(/xray/i);
    // cls-hooked, which the X-Ray SDK loads, registers its namespace here.
    expect((process as { namespaces?: Record<string, unknown> }).namespaces?.AWSXRay).toBeUndefined();
  });

  it('inside Lambda loads on first use and traces the clients created before and after', () => {
    // In a process of its own: loading the X-Ray SDK hooks every promise of the process it runs in.
    const code = `
      const { createAwsClients } = await import(${JSON.stringify(new URL('../../shared/aws/clients.ts', import.meta.url).href)});
      const { tracer } = await import(${JSON.stringify(new URL('../../shared/aws/tracer.ts', import.meta.url).href)});
      const traced = (client) => client.middlewareStack.identify().some((name) => /xray/i.test(name));
      const early = createAwsClients();
      const before = traced(early.dynamo);
      const loaded = (await tracer()) !== undefined;
      process.stdout.write(JSON.stringify([before, loaded, traced(early.dynamo), traced(createAwsClients().s3)]));`;
    const answer = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
      encoding: 'utf8',
      env: {
        ...process.env,
        AWS_EXECUTION_ENV: 'AWS_Lambda_nodejs20.x',
        AWS_XRAY_CONTEXT_MISSING: 'IGNORE_ERROR',
      },
    });
    expect(JSON.parse(answer)).toEqual([false, true, true, true]);
  });

  it('is on inside Lambda unless the stack turned it off or SAM runs it locally', () => {
    const lambda = { AWS_EXECUTION_ENV: 'AWS_Lambda_nodejs20.x' };
    expect(readConfig(lambda).tracing).toBe(true);
    expect(readConfig({ ...lambda, POWERTOOLS_TRACE_ENABLED: 'true' }).tracing).toBe(true);
    expect(readConfig({ ...lambda, POWERTOOLS_TRACE_ENABLED: 'false' }).tracing).toBe(false);
    expect(readConfig({ ...lambda, AWS_SAM_LOCAL: 'true' }).tracing).toBe(false);
    expect(readConfig({}).tracing).toBe(false);
  });
});
