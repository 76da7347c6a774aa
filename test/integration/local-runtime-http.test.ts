import type { APIGatewayProxyEventV2, ScheduledEvent } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LocalRuntime, startLocalRuntime } from '../../local/runtime/lambda-runtime.js';
import { type Topology, topology } from '../../shared/base/topology.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { waitFor } from '../support/wait.js';

interface Echo {
  readonly event: APIGatewayProxyEventV2;
  readonly futuresTable: string | null;
}

describe('local runtime: HTTP API trigger', () => {
  let cloud: TestCloud;
  let runtime: LocalRuntime;
  let base: string;

  beforeAll(async () => {
    cloud = await setupTestCloud();
    // The api function's entry points at a fixture, so the import-by-path route is exercised too.
    const echoTopology: Topology = {
      ...topology,
      functions: {
        ...topology.functions,
        api: { ...topology.functions.api, entry: 'test/support/fixtures/echo-handler.ts' },
      },
    };
    runtime = await startLocalRuntime({ topology: echoTopology, env: cloud.env, functions: ['api'] });
    base = runtime.apiUrl ?? '';
  });
  afterAll(async () => {
    await runtime?.stop();
  });

  it('builds a payload-2.0 event from a JSON request and writes the structured result back', async () => {
    const response = await fetch(`${base}/api/v1/things?a=1&a=2&b=x%20y`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-Mixed-Case': 'Value', Cookie: 'c1=v1; c2=v2' },
      body: JSON.stringify({ hello: 'world' }),
    });
    expect(response.status).toBe(201);
    expect(response.headers.get('x-echo')).toBe('yes');
    expect(response.headers.get('set-cookie')).toBe('session=abc; Path=/');
    const { event, futuresTable } = (await response.json()) as Echo;
    expect(futuresTable).toBe(cloud.names.tables.futures);
    expect(event).toMatchObject({
      version: '2.0',
      routeKey: '$default',
      rawPath: '/api/v1/things',
      rawQueryString: 'a=1&a=2&b=x%20y',
      queryStringParameters: { a: '1,2', b: 'x y' },
      cookies: ['c1=v1', 'c2=v2'],
      body: '{"hello":"world"}',
      isBase64Encoded: false,
      requestContext: {
        http: { method: 'POST', path: '/api/v1/things', sourceIp: '127.0.0.1' },
        stage: '$default',
      },
    });
    expect(event.headers['x-mixed-case']).toBe('Value');
    expect(event.headers['content-type']).toBe('application/json');
    expect(Object.keys(event.headers).every((name) => name === name.toLowerCase())).toBe(true);
  });

  it('base64-encodes a binary request body and decodes a base64 result', async () => {
    const bytes = Uint8Array.from([0, 1, 2, 250, 255]);
    const echoed = await fetch(`${base}/upload`, {
      method: 'PUT',
      headers: { 'content-type': 'application/octet-stream' },
      body: bytes,
    });
    const { event } = (await echoed.json()) as Echo;
    expect(event.isBase64Encoded).toBe(true);
    expect(Buffer.from(event.body ?? '', 'base64')).toEqual(Buffer.from(bytes));
    expect(event.queryStringParameters).toBeUndefined();

    const binary = await fetch(`${base}/binary`);
    expect(binary.headers.get('content-type')).toBe('application/octet-stream');
    expect(Buffer.from(await binary.arrayBuffer())).toEqual(Buffer.from([0, 1, 254, 255]));
  });

  it('answers 500 as API Gateway does when the handler throws, and keeps serving', async () => {
    const crashed = await fetch(`${base}/crash`);
    expect(crashed.status).toBe(500);
    expect(await crashed.json()).toEqual({ message: 'Internal Server Error' });
    expect((await fetch(`${base}/after`)).status).toBe(201);
  });
});

describe('local runtime: schedule trigger', () => {
  it('fires on demand with an EventBridge event, and by itself at the declared rate', async () => {
    const cloud = await setupTestCloud();
    const fired: ScheduledEvent[] = [];
    const sweeper = async (event: ScheduledEvent): Promise<string> => {
      fired.push(event);
      return 'swept';
    };
    // 0.01 minutes = 600 ms, so the timer path is seen within the test.
    const fastTopology: Topology = {
      ...topology,
      functions: {
        ...topology.functions,
        sweeper: { ...topology.functions.sweeper, triggers: [{ kind: 'schedule', rateMinutes: 0.01 }] },
      },
    };
    const runtime = await startLocalRuntime({
      topology: fastTopology,
      env: cloud.env,
      functions: ['sweeper'],
      handlers: { sweeper },
    });
    try {
      expect(runtime.apiUrl).toBeUndefined();
      await expect(runtime.runSchedule('sweeper')).resolves.toBe('swept');
      expect(fired[0]).toMatchObject({ source: 'aws.events', 'detail-type': 'Scheduled Event', detail: {} });
      await waitFor('a timer tick', () => fired.length >= 2, 5_000);
      await expect(runtime.runSchedule('worker')).rejects.toThrow(/no schedule trigger/);
    } finally {
      await runtime.stop();
    }
  });
});
