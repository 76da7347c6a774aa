import type { Tracer } from '@aws-lambda-powertools/tracer';
import { config } from '../base/config.js';

/**
 * X-Ray tracing through Powertools' Tracer: a segment per handler invocation and a subsegment per AWS
 * SDK call. On where `config().tracing` says so: inside Lambda's execution environment, unless the
 * stack's `-c tracing=false` turned it off. The service name is POWERTOOLS_SERVICE_NAME, which the
 * stack sets per function.
 *
 * The Tracer is loaded only where tracing is on. Loading it loads the X-Ray SDK, which enables an
 * async hook that tracks every promise of the process (measured in `npm run bench -- engine`: about a
 * tenth of the local stack's Node CPU); `npm start`, the tests and a GPU host's worker never load it.
 * Clients created before the first invocation are captured when it loads (an invocation's AWS calls
 * all run after that).
 */
let loading: Promise<Tracer | undefined> | undefined;
let loaded: Tracer | undefined;
const uncaptured: object[] = [];

/** The tracer where tracing is on (loaded on first use), else undefined. */
export async function tracer(): Promise<Tracer | undefined> {
  if (!config().tracing) return undefined;
  loading ??= import('@aws-lambda-powertools/tracer').then(({ Tracer }) => {
    const active = new Tracer({ enabled: true });
    if (!active.isTracingEnabled()) return undefined;
    for (const client of uncaptured.splice(0)) active.captureAWSv3Client(client);
    loaded = active;
    return active;
  });
  return loading;
}

/** Traces an AWS SDK v3 client's calls where tracing is on (the same client, its middleware added). */
export function captureClient<T extends object>(client: T): T {
  if (loaded !== undefined) return loaded.captureAWSv3Client(client);
  if (config().tracing) uncaptured.push(client);
  return client;
}

/**
 * Runs one invocation of a handler in its own subsegment (`## <name>`), annotated with the cold start
 * and the service, an error recorded on it: what Powertools' `captureLambdaHandler` does for a class
 * method, for the project's function handlers. Without tracing, or without a segment (no Lambda
 * invocation around it), it only runs `run`.
 */
export function traceInvocation<T>(name: string, run: () => Promise<T>): Promise<T> {
  if (!config().tracing) return run();
  return tracer().then((active) => (active === undefined ? run() : traced(active, name, run)));
}

async function traced<T>(active: Tracer, name: string, run: () => Promise<T>): Promise<T> {
  const parent = active.getSegment();
  if (parent === undefined) return run();
  const subsegment = parent.addNewSubsegment(`## ${name}`);
  active.setSegment(subsegment);
  active.annotateColdStart();
  active.addServiceNameAnnotation();
  try {
    return await run();
  } catch (error) {
    active.addErrorAsMetadata(error as Error);
    throw error;
  } finally {
    subsegment.close();
    active.setSegment(parent);
  }
}
