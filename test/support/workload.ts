import { uniformAt } from '../../shared/backend/reference/prng.js';
import type { RlLossFn } from '../../shared/client/rl-inputs.js';

/**
 * Seeded random workloads for the end-to-end suite: per tenant, a script of client actions over its
 * models (creates, interleaved passes, optimizer steps, saves, loads, samples, duplicate and
 * conflicting resubmits). Pure: the same seed gives the same scripts. What the server answers (ids,
 * seqs) is the driver's business (tenant-driver.ts).
 */

/** A datum: text whose bytes are the tokens; `bad` puts a token outside the vocabulary (a user error). */
export interface DatumSpec {
  readonly text: string;
  readonly weights?: readonly number[];
  readonly bad?: boolean;
  /** For a policy-gradient pass: per target token, the sampler's logprob and the advantage. */
  readonly rl?: { readonly logprobs: readonly number[]; readonly advantages: readonly number[] };
}

export interface SampleSpec {
  /** `undefined`: the base model; otherwise a sampler checkpoint saved earlier in the script. */
  readonly checkpoint?: { readonly model: number; readonly name: string };
  readonly prompt: string;
  readonly num_samples: number;
  readonly max_tokens: number;
  readonly temperature: number;
  readonly top_k: number;
  /** `undefined`: the server picks (and stores) one. */
  readonly seed?: number;
  readonly prompt_logprobs: boolean;
}

/** `model` is a global model index; each tenant acts only on its own models. */
export type Action =
  | { readonly kind: 'create'; readonly model: number; readonly rank: number; readonly seed: number }
  | {
      readonly kind: 'pass';
      readonly type: 'forward' | 'forward_backward';
      readonly model: number;
      readonly data: readonly DatumSpec[];
      /** A policy-gradient pass (its datums carry `rl`); cross_entropy otherwise. See rl-inputs.ts. */
      readonly loss?: RlLossFn;
      /** Sent twice at once: both answers must name the same future (R7). */
      readonly concurrentDuplicate: boolean;
    }
  | { readonly kind: 'optim'; readonly model: number; readonly learning_rate: number }
  | { readonly kind: 'save'; readonly model: number; readonly name: string }
  | { readonly kind: 'save_sampler'; readonly model: number; readonly name: string }
  | { readonly kind: 'load'; readonly model: number; readonly name: string; readonly optimizer: boolean }
  | { readonly kind: 'sample'; readonly spec: SampleSpec }
  /** Resend an earlier submit of this tenant exactly (a client retry): the same future comes back. */
  | { readonly kind: 'resend'; readonly back: number }
  /** Reuse the model's last seq_id with another payload: a non-retryable 400 that changes nothing. */
  | { readonly kind: 'conflict'; readonly model: number };

export interface TenantScript {
  readonly tenant: string;
  readonly models: readonly number[];
  readonly actions: readonly Action[];
}

export interface WorkloadShape {
  readonly seed: number;
  /** Models per tenant, e.g. [2, 2, 1]. */
  readonly modelsPerTenant: readonly number[];
  /** Actions after the creates, per tenant. */
  readonly actionsPerTenant: readonly number[];
}

class Random {
  #counter = 0;
  constructor(private readonly seed: number) {}
  next(): number {
    return uniformAt(this.seed, this.#counter++);
  }
  int(low: number, high: number): number {
    return low + Math.floor(this.next() * (high - low + 1));
  }
  pick<T>(items: readonly T[]): T {
    const item = items[Math.floor(this.next() * items.length)];
    if (item === undefined) throw new Error('pick from an empty list');
    return item;
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
}

const ALPHABET = 'abcdeilnorst .';

function text(random: Random, length: number): string {
  return Array.from({ length }, () => random.pick([...ALPHABET])).join('');
}

function datum(random: Random, allowBad: boolean): DatumSpec {
  const value = text(random, random.int(3, 10));
  const weights = random.chance(0.3)
    ? Array.from({ length: value.length - 1 }, () => random.pick([0, 0.5, 1]))
    : undefined;
  return {
    text: value,
    ...(weights ? { weights } : {}),
    ...(allowBad && random.chance(0.08) ? { bad: true } : {}),
  };
}

/**
 * A rollout as an RL step trains on it: a few untrained prompt targets, then the completion's, all
 * with the rollout's advantage and logprobs near a byte model's (about log 1/256), so an importance
 * ratio stays moderate.
 */
function rlDatum(random: Random, allowBad: boolean): DatumSpec {
  const value = text(random, random.int(3, 10));
  const targets = value.length - 1;
  const prompt = random.int(0, Math.min(2, targets - 1));
  const advantage = random.pick([-1, -0.5, 0.25, 0.5, 1]);
  return {
    text: value,
    rl: {
      logprobs: Array.from({ length: targets }, (_, i) => (i < prompt ? 0 : -random.int(20, 80) / 10)),
      advantages: Array.from({ length: targets }, (_, i) => (i < prompt ? 0 : advantage)),
    },
    ...(allowBad && random.chance(0.08) ? { bad: true } : {}),
  };
}

/** Action weights after the creates; a kind whose precondition is unmet falls back to a pass. */
const WEIGHTS: readonly [Action['kind'], number][] = [
  ['pass', 40],
  ['optim', 20],
  ['save', 6],
  ['save_sampler', 8],
  ['load', 6],
  ['sample', 12],
  ['resend', 6],
  ['conflict', 2],
];

export function generateWorkload(shape: WorkloadShape): TenantScript[] {
  const random = new Random(shape.seed);
  const scripts: TenantScript[] = [];
  let nextModel = 0;
  shape.modelsPerTenant.forEach((count, t) => {
    const models = Array.from({ length: count }, () => nextModel++);
    const actions: Action[] = models.map((model) => ({
      kind: 'create',
      model,
      rank: random.pick([2, 4, 8]),
      seed: random.int(0, 1000),
    }));
    // A retried create_model gives back the same future and model.
    actions.push({ kind: 'resend', back: 1 });
    const weightsSaved = new Map<number, string[]>();
    const samplersSaved: { model: number; name: string }[] = [];
    let names = 0;
    const total = WEIGHTS.reduce((sum, [, weight]) => sum + weight, 0);
    for (let i = 0; i < (shape.actionsPerTenant[t] ?? 0); i++) {
      const model = random.pick(models);
      let roll = random.next() * total;
      let kind: Action['kind'] = 'pass';
      for (const [candidate, weight] of WEIGHTS) {
        roll -= weight;
        if (roll < 0) {
          kind = candidate;
          break;
        }
      }
      const saved = weightsSaved.get(model) ?? [];
      if (kind === 'load' && saved.length === 0) kind = 'pass';
      switch (kind) {
        case 'pass': {
          const type = random.chance(0.75) ? 'forward_backward' : 'forward';
          const loss = random.chance(0.3) ? random.pick<RlLossFn>(['importance_sampling', 'ppo']) : undefined;
          actions.push({
            kind: 'pass',
            type,
            model,
            data: Array.from({ length: random.int(1, 3) }, () =>
              loss === undefined ? datum(random, true) : rlDatum(random, true),
            ),
            ...(loss === undefined ? {} : { loss }),
            concurrentDuplicate: random.chance(0.08),
          });
          break;
        }
        case 'optim':
          actions.push({ kind: 'optim', model, learning_rate: random.pick([0.01, 0.05, 0.1]) });
          break;
        case 'save': {
          const name = `w${names++}`;
          weightsSaved.set(model, [...saved, name]);
          actions.push({ kind: 'save', model, name });
          break;
        }
        case 'save_sampler': {
          const name = `s${names++}`;
          samplersSaved.push({ model, name });
          actions.push({ kind: 'save_sampler', model, name });
          break;
        }
        case 'load':
          actions.push({ kind: 'load', model, name: random.pick(saved), optimizer: random.chance(0.5) });
          break;
        case 'sample':
          actions.push({
            kind: 'sample',
            spec: {
              ...(samplersSaved.length > 0 && random.chance(0.7)
                ? { checkpoint: random.pick(samplersSaved) }
                : {}),
              prompt: text(random, random.int(1, 4)),
              num_samples: random.int(1, 2),
              max_tokens: random.int(3, 8),
              temperature: random.pick([0, 0.7, 1]),
              top_k: random.pick([-1, 5]),
              ...(random.chance(0.6) ? { seed: random.int(0, 100_000) } : {}),
              prompt_logprobs: random.chance(0.3),
            },
          });
          break;
        case 'resend':
          actions.push({ kind: 'resend', back: random.int(1, 5) });
          break;
        case 'conflict':
          actions.push({ kind: 'conflict', model });
          break;
      }
    }
    scripts.push({ tenant: `tenant-${t}`, models, actions });
  });
  return scripts;
}

/** Requests a script makes that create a future (for sizing; resends and conflicts create none). */
export function countFutures(scripts: readonly TenantScript[]): number {
  return scripts
    .flatMap((script) => script.actions)
    .filter((action) => action.kind !== 'resend' && action.kind !== 'conflict').length;
}
