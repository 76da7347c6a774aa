import { localAwsClients } from '../../local/cloud/aws-clients.js';
import { initializeStackOf } from '../../local/cloud/client-middleware.js';
import type { CloudEndpoints } from '../../local/cloud/cloud.js';
import type { AwsClients } from '../../shared/aws/clients.js';

/**
 * Every AWS call a piece of code makes, in the order sent, for tests that pin how many calls (and
 * which) a tick or a work item costs: a regression that adds one fails them. Each entry is
 * `<Operation> <table, or the key's first path segment, or queue>`, e.g. `GetItem models`,
 * `GetObject state`, `TransactWriteItems Update:models+Update:futures`.
 */
export interface CallLog {
  readonly calls: string[];
  /**
   * Round trips in sequence: the longest chain of calls each sent after the previous one answered
   * (calls in flight together count once). What a path's latency is made of, as a count. `only`
   * keeps the calls whose entry it accepts (the chain of those calls alone).
   */
  depth(only?: (call: string) => boolean): number;
  reset(): void;
}

interface Span {
  readonly start: number;
  end: number;
}

/** Fresh clients on the cloud's endpoints whose every call is logged (the test's own clients stay quiet). */
export function loggedClients(
  endpoints: CloudEndpoints,
  prefix: string,
): { clients: AwsClients; log: CallLog } {
  const clients = localAwsClients(endpoints);
  const calls: string[] = [];
  /** Each call's span, by the call's position in `calls`. */
  const spans: Span[] = [];
  const log: CallLog = {
    calls,
    depth: (only) => {
      // Longest chain by start time: a call extends every chain whose last call ended before it began.
      const kept = only === undefined ? spans : spans.filter((_, index) => only(calls[index] ?? ''));
      const sorted = [...kept].sort((a, b) => a.start - b.start);
      const chain: number[] = [];
      sorted.forEach((span, index) => {
        let longest = 0;
        for (let before = 0; before < index; before++) {
          if ((sorted[before] as Span).end <= span.start) longest = Math.max(longest, chain[before] ?? 0);
        }
        chain.push(longest + 1);
      });
      return Math.max(0, ...chain);
    },
    reset: () => {
      calls.length = 0;
      spans.length = 0;
    },
  };
  const unprefixed = (name: string): string =>
    name.startsWith(`${prefix}-`) ? name.slice(prefix.length + 1) : name;
  const target = (input: Record<string, unknown>): string => {
    if (typeof input.TableName === 'string') return unprefixed(input.TableName);
    if (typeof input.Key === 'string') return input.Key.split('/')[0] ?? '';
    if (typeof input.RequestItems === 'object' && input.RequestItems !== null) {
      return Object.keys(input.RequestItems).map(unprefixed).sort().join('+');
    }
    if (Array.isArray(input.TransactItems)) {
      return (input.TransactItems as Record<string, { TableName?: string }>[])
        .map((item) => {
          const [kind, body] = Object.entries(item)[0] ?? ['?', {}];
          return `${kind}:${unprefixed(body.TableName ?? '?')}`;
        })
        .join('+');
    }
    if (typeof input.QueueUrl === 'string') return 'queue';
    return '';
  };
  for (const client of [clients.dynamo, clients.s3, clients.sqs]) {
    initializeStackOf(client).add(
      (next, context) => async (args) => {
        const operation = (context.commandName ?? '?').replace(/Command$/, '');
        calls.push(`${operation} ${target(args.input as Record<string, unknown>)}`.trim());
        const span: Span = { start: performance.now(), end: Number.POSITIVE_INFINITY };
        spans.push(span);
        try {
          return await next(args);
        } finally {
          span.end = performance.now();
        }
      },
      { step: 'initialize', priority: 'high', name: 'callLog', override: true },
    );
  }
  return { clients, log };
}
