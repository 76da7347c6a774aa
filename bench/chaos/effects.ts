import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';

/**
 * R7's "committed once", observed on the wire: every TransactWriteItems that really succeeded (seen
 * inside the fault injector, so a commit whose answer was then replaced by an injected timeout still
 * counts) is recorded by what it applied. A future ended by two different successful transactions,
 * or a model seq applied by two, is a duplicated effect. Retries that reuse a commit's
 * ClientRequestToken are one transaction (DynamoDB applies it once), so effects are keyed by token.
 */

type Handler = (args: { input: object }) => Promise<{ output: object }>;
interface Stack {
  add(
    middleware: (next: Handler, context: { commandName?: string }) => Handler,
    options: { step: 'initialize'; priority: 'low'; name: string; override: boolean },
  ): void;
  remove(name: string): boolean;
}

interface UpdateAction {
  readonly TableName?: string;
  readonly Key?: Record<string, unknown>;
  readonly UpdateExpression?: string;
  readonly ConditionExpression?: string;
  readonly ExpressionAttributeValues?: Record<string, unknown>;
}

const MIDDLEWARE = 'chaosEffects';

/** A document-client value, or a marshalled one (`{S: ...}`, `{N: ...}`). */
function plain(value: unknown): unknown {
  if (typeof value !== 'object' || value === null) return value;
  const wire = value as { S?: string; N?: string };
  if (typeof wire.S === 'string') return wire.S;
  if (typeof wire.N === 'string') return Number(wire.N);
  return value;
}

export class CommitEffects {
  /** request id -> tokens of the successful transactions that ended it. */
  readonly #futures = new Map<string, Set<string>>();
  /** model id -> token -> the seqs (base, applied] that transaction applied. */
  readonly #models = new Map<string, Map<string, { base: number; applied: number }>>();
  transactions = 0;

  constructor(private readonly tables: { readonly futures: string; readonly models: string }) {}

  attach(dynamo: DynamoDBClient): () => void {
    const stack = dynamo.middlewareStack as unknown as Stack;
    stack.add(
      (next, context) => async (args) => {
        const result = await next(args);
        if (context.commandName === 'TransactWriteItemsCommand') this.#record(args.input);
        return result;
      },
      { step: 'initialize', priority: 'low', name: MIDDLEWARE, override: true },
    );
    return () => void stack.remove(MIDDLEWARE);
  }

  #record(input: object): void {
    const { TransactItems, ClientRequestToken } = input as {
      TransactItems?: { Update?: UpdateAction }[];
      ClientRequestToken?: string;
    };
    this.transactions++;
    // Without a token every call is its own transaction.
    const token = ClientRequestToken ?? `untokened-${this.transactions}`;
    for (const item of TransactItems ?? []) {
      const update = item.Update;
      if (update === undefined) continue;
      const values = update.ExpressionAttributeValues ?? {};
      if (update.TableName === this.tables.futures && /\bREMOVE live\b/.test(update.UpdateExpression ?? '')) {
        const requestId = String(plain(update.Key?.request_id));
        const tokens = this.#futures.get(requestId) ?? new Set<string>();
        tokens.add(token);
        this.#futures.set(requestId, tokens);
      }
      if (update.TableName === this.tables.models && ':base' in values && ':applied' in values) {
        const modelId = String(plain(update.Key?.model_id));
        const commits = this.#models.get(modelId) ?? new Map();
        commits.set(token, {
          base: Number(plain(values[':base'])),
          applied: Number(plain(values[':applied'])),
        });
        this.#models.set(modelId, commits);
      }
    }
  }

  /** Futures ended by more than one transaction. */
  duplicateFutures(): string[] {
    return [...this.#futures].filter(([, tokens]) => tokens.size > 1).map(([requestId]) => requestId);
  }

  /** `model#seq` for every seq applied by more than one commit of its model. */
  duplicateSeqs(): string[] {
    const duplicates: string[] = [];
    for (const [modelId, commits] of this.#models) {
      const applied = new Map<number, number>();
      for (const { base, applied: through } of commits.values()) {
        for (let seq = base + 1; seq <= through; seq++) applied.set(seq, (applied.get(seq) ?? 0) + 1);
      }
      for (const [seq, times] of applied) if (times > 1) duplicates.push(`${modelId}#${seq}`);
    }
    return duplicates;
  }

  /** Seqs applied per model (each counted once), to check against the model rows. */
  appliedSeqs(modelId: string): number {
    const seqs = new Set<number>();
    for (const { base, applied } of this.#models.get(modelId)?.values() ?? []) {
      for (let seq = base + 1; seq <= applied; seq++) seqs.add(seq);
    }
    return seqs.size;
  }
}
