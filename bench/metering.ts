import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { S3Client } from '@aws-sdk/client-s3';
import type { SQSClient } from '@aws-sdk/client-sqs';

/**
 * Deterministic cost counters for benchmarks, attached as SDK middleware to an injected client:
 * calls per operation, consumed capacity (ReturnConsumedCapacity is switched on for every DynamoDB
 * call that accepts it), bytes received and request body bytes sent (`Body` of a PutObject or an
 * UploadPart: what a PUT stores).
 */
export interface Meter {
  calls: number;
  callsByOperation: Record<string, number>;
  rcu: number;
  wcu: number;
  bytesIn: number;
  /** Sizes of the request bodies sent (`input.Body`, a string or bytes). */
  bytesOut: number;
  reset(): void;
}

interface ConsumedCapacity {
  CapacityUnits?: number;
  ReadCapacityUnits?: number;
  WriteCapacityUnits?: number;
}

const READ_OPERATIONS = new Set([
  'GetItemCommand',
  'BatchGetItemCommand',
  'QueryCommand',
  'ScanCommand',
  'TransactGetItemsCommand',
]);

export function createMeter(): Meter {
  const meter: Meter = {
    calls: 0,
    callsByOperation: {},
    rcu: 0,
    wcu: 0,
    bytesIn: 0,
    bytesOut: 0,
    reset() {
      meter.calls = 0;
      meter.callsByOperation = {};
      meter.rcu = 0;
      meter.wcu = 0;
      meter.bytesIn = 0;
      meter.bytesOut = 0;
    },
  };
  return meter;
}

type AnyClient = DynamoDBClient | S3Client | SQSClient;

export function attachMeter(client: AnyClient, meter: Meter, options: { dynamo?: boolean } = {}): void {
  const stack = client.middlewareStack as unknown as {
    add(middleware: unknown, options: { step: string; name: string; priority?: string }): void;
  };
  stack.add(
    (
      next: (args: { input: Record<string, unknown> }) => Promise<{ output: Record<string, unknown> }>,
      context: { commandName?: string },
    ) =>
      async (args: { input: Record<string, unknown> }) => {
        const operation = context.commandName ?? 'unknown';
        if (options.dynamo && !('ReturnConsumedCapacity' in args.input)) {
          args.input.ReturnConsumedCapacity = 'TOTAL';
        }
        meter.calls++;
        meter.callsByOperation[operation] = (meter.callsByOperation[operation] ?? 0) + 1;
        const body = args.input.Body;
        if (typeof body === 'string') meter.bytesOut += Buffer.byteLength(body);
        else if (body instanceof Uint8Array) meter.bytesOut += body.length;
        const result = await next(args);
        const consumed = result.output.ConsumedCapacity as ConsumedCapacity | ConsumedCapacity[] | undefined;
        for (const entry of Array.isArray(consumed) ? consumed : consumed ? [consumed] : []) {
          const units = entry.CapacityUnits ?? 0;
          if (READ_OPERATIONS.has(operation)) meter.rcu += entry.ReadCapacityUnits ?? units;
          else meter.wcu += entry.WriteCapacityUnits ?? units;
        }
        return result;
      },
    { step: 'initialize', name: 'benchMeterInitialize' },
  );
  stack.add(
    (next: (args: unknown) => Promise<{ response: { headers?: Record<string, string> } }>) =>
      async (args: unknown) => {
        const result = await next(args);
        const length = Number(result.response?.headers?.['content-length'] ?? 0);
        if (Number.isFinite(length)) meter.bytesIn += length;
        return result;
      },
    { step: 'deserialize', name: 'benchMeterBytes', priority: 'low' },
  );
}
