import { AsyncLocalStorage } from 'node:async_hooks';
import { LogFormatter, Logger, LogItem } from '@aws-lambda-powertools/logger';
import type { LogAttributes, UnformattedAttributes } from '@aws-lambda-powertools/logger/types';

/** Values a log scope adds to each line: ids and names only (never payloads, tokens or keys). */
export type LogKeys = Readonly<Record<string, string | number>>;

/** The Lambda invocation a line belongs to, as Powertools' `injectLambdaContext` would add it. */
export interface LambdaLogContext {
  readonly awsRequestId: string;
  readonly functionName: string;
  readonly functionVersion?: string;
  readonly invokedFunctionArn?: string;
  readonly memoryLimitInMB?: string;
}

interface LogScope {
  /** The scope's own copy: keys appended inside it end with it, and never reach the scope around it. */
  readonly keys: Record<string, string | number>;
  readonly lambda?: LambdaLogContext & { readonly coldStart: boolean };
}

/**
 * Per-invocation log context lives in an async scope rather than in the logger (Powertools'
 * `appendKeys`/`addContext` hold one set per process): the local runtime runs invocations of every
 * function side by side in one process, and a GPU host's worker runs work items side by side, so a
 * per-process set would mix their keys. A scope ends with the code it wraps, so nothing it held
 * reaches the next invocation of a warm container.
 */
const scopes = new AsyncLocalStorage<LogScope>();

/** The first invocation this process serves is its cold start. */
let coldStart = true;

/**
 * Powertools' standard JSON line (level, message, timestamp, service, the Lambda context fields,
 * sampling rate, X-Ray trace id), with the running scope's Lambda context and keys.
 */
class ScopedLogFormatter extends LogFormatter {
  override formatAttributes(attributes: UnformattedAttributes, additional: LogAttributes): LogItem {
    const scope = scopes.getStore();
    const lambda = scope?.lambda ?? attributes.lambdaContext;
    return new LogItem({
      attributes: {
        level: attributes.logLevel,
        message: attributes.message,
        timestamp: this.formatTimestamp(attributes.timestamp),
        service: attributes.serviceName,
        cold_start: lambda?.coldStart,
        function_arn: lambda?.invokedFunctionArn,
        function_memory_size: lambda?.memoryLimitInMB,
        function_name: lambda?.functionName,
        function_request_id: lambda?.awsRequestId,
        sampling_rate: attributes.sampleRateValue,
        xray_trace_id: attributes.xRayTraceId,
      },
    }).addAttributes({ ...scope?.keys, ...additional });
  }
}

/**
 * The one configured logger. Never log payloads, tokens or API keys: log ids and counts.
 * Level from POWERTOOLS_LOG_LEVEL (default INFO; the local runtime and tests set WARN).
 */
export const logger = new Logger({
  serviceName: 'tinker-serverless',
  logFormatter: new ScopedLogFormatter(),
});

/** Runs `run` with `keys` added to every line it logs (on top of the keys of the scope around it). */
export function withLogKeys<T>(keys: LogKeys, run: () => T): T {
  const outer = scopes.getStore();
  return scopes.run({ ...outer, keys: { ...outer?.keys, ...keys } }, run);
}

/**
 * Runs one Lambda invocation: every line it logs carries the invocation's request id, function and
 * cold start flag, and the keys appended during it (`appendLogKeys`). Tests call handlers without a
 * context: their lines carry no Lambda fields.
 */
export function withLambdaLogContext<T>(context: LambdaLogContext | undefined, run: () => T): T {
  if (context === undefined) return scopes.run({ keys: {} }, run);
  const lambda = {
    awsRequestId: context.awsRequestId,
    functionName: context.functionName,
    ...(context.functionVersion === undefined ? {} : { functionVersion: context.functionVersion }),
    ...(context.invokedFunctionArn === undefined ? {} : { invokedFunctionArn: context.invokedFunctionArn }),
    ...(context.memoryLimitInMB === undefined ? {} : { memoryLimitInMB: context.memoryLimitInMB }),
    coldStart,
  };
  coldStart = false;
  return scopes.run({ keys: {}, lambda }, run);
}

/**
 * Adds keys learned part-way (the tenant once the key is checked, a validated model id) to the
 * running scope, for the rest of it. Outside any scope it adds nothing: a process-wide key would
 * outlive the request it describes.
 */
export function appendLogKeys(keys: LogKeys): void {
  const scope = scopes.getStore();
  if (scope !== undefined) Object.assign(scope.keys, keys);
}
