import type { Context } from 'aws-lambda';
import { type LambdaLogContext, withLambdaLogContext } from '../base/logger.js';
import { traceInvocation } from './tracer.js';

/**
 * A function's handler as Lambda calls it, observed: its log lines carry the invocation (request id,
 * function, cold start) and the keys appended while it runs, which end with it (`shared/base/logger.ts`),
 * and it runs in its own X-Ray subsegment when tracing is on (`tracer.ts`). What Powertools'
 * `injectLambdaContext` and `captureLambdaHandler` do for a class method, for a plain function.
 * Tests call handlers with a partial context or none; those lines carry no Lambda fields.
 */
export function observedHandler<E, C extends object, R>(
  name: string,
  handler: (event: E, context?: C) => Promise<R>,
): (event: E, context?: C) => Promise<R> {
  return (event, context) =>
    withLambdaLogContext(lambdaLogContext(context), () =>
      traceInvocation(name, () => handler(event, context)),
    );
}

function lambdaLogContext(context: object | undefined): LambdaLogContext | undefined {
  if (context === undefined) return undefined;
  const { awsRequestId, functionName, functionVersion, invokedFunctionArn, memoryLimitInMB } =
    context as Partial<Context>;
  if (typeof awsRequestId !== 'string' || typeof functionName !== 'string') return undefined;
  return {
    awsRequestId,
    functionName,
    ...(functionVersion === undefined ? {} : { functionVersion }),
    ...(invokedFunctionArn === undefined ? {} : { invokedFunctionArn }),
    ...(memoryLimitInMB === undefined ? {} : { memoryLimitInMB: String(memoryLimitInMB) }),
  };
}
