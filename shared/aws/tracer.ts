import { Tracer } from '@aws-lambda-powertools/tracer';
import { config } from '../base/config.js';

/**
 * X-Ray tracing through Powertools' Tracer: a segment per handler invocation and a subsegment per AWS
 * SDK call (the clients of `clients.ts` are captured where they are created). On unless
 * `config().tracing` is false (the stack's `-c tracing=false`); Powertools also keeps it off outside
 * Lambda's execution environment, so `npm start`, the tests and a GPU host's worker trace nothing and
 * need no X-Ray daemon. The service name is POWERTOOLS_SERVICE_NAME, which the stack sets per function.
 */
let shared: Tracer | undefined;

export function tracer(): Tracer {
  shared ??= new Tracer({ enabled: config().tracing });
  return shared;
}

/** Traces an AWS SDK v3 client's calls (returned as is when tracing is off). */
export function captureClient<T>(client: T): T {
  return tracer().isTracingEnabled() ? tracer().captureAWSv3Client(client) : client;
}

/**
 * Runs one invocation of a handler in its own subsegment (`## <name>`), annotated with the cold start
 * and the service, an error recorded on it: what Powertools' `captureLambdaHandler` does for a class
 * method, for the project's function handlers. Without tracing, or without a segment (no Lambda
 * invocation around it), it only runs `run`.
 */
export async function traceInvocation<T>(name: string, run: () => Promise<T>): Promise<T> {
  const active = tracer();
  if (!active.isTracingEnabled()) return run();
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
