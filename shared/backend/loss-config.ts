/**
 * Tinker's loss functions as a contract (docs/api.md#loss-functions; docs/design.md#l1): the
 * `loss_fn_inputs` each one needs and the `loss_fn_config` keys it takes, with their defaults and the
 * values allowed. Intake (shared/services/api/request-checks.ts) and every backend read this one table, so a key
 * accepted at the edge is a key the loss understands, with the same default.
 */

/** Loss functions the Tinker SDK names (LossFnType), with the loss_fn_inputs each one needs. */
export const LOSS_FN_INPUTS = {
  cross_entropy: ['target_tokens'],
  importance_sampling: ['target_tokens', 'logprobs', 'advantages'],
  ppo: ['target_tokens', 'logprobs', 'advantages'],
  cispo: ['target_tokens', 'logprobs', 'advantages'],
  dro: ['target_tokens', 'logprobs', 'advantages'],
} as const satisfies Record<string, readonly string[]>;

export type LossFn = keyof typeof LOSS_FN_INPUTS;
export const LOSS_FNS = Object.keys(LOSS_FN_INPUTS) as [LossFn, ...LossFn[]];

export function isLossFn(name: string): name is LossFn {
  return Object.hasOwn(LOSS_FN_INPUTS, name);
}

/**
 * Loss inputs that are per-target floats: of `target_tokens`' shape, finite. `logprobs` and
 * `advantages` must also be float32 (the SDK always sends them so); `weights` may arrive as int64 from
 * a JSON client and is converted.
 */
export const FLOAT_LOSS_INPUTS: readonly string[] = ['weights', 'logprobs', 'advantages'];
export const FLOAT32_ONLY_INPUTS: readonly string[] = ['logprobs', 'advantages'];

export interface LossConfigKey {
  readonly defaultValue: number;
  /** What a value must be, for the error message. */
  readonly rule: string;
  readonly allows: (value: number) => boolean;
}

/**
 * Ratio bounds of ppo and cispo. Tinker documents epsilon = 0.2, i.e. [0.8, 1.2]. A lower bound above 1
 * or an upper bound below 1 would clip the on-policy ratio r = 1 itself, which is always a mistake
 * (typically epsilon passed where 1 +- epsilon is meant), so lo <= 1 <= hi is required; lo = 0 means no
 * lower bound (r is always positive) and hi may be as large as wanted.
 */
const CLIP_BOUNDS: Readonly<Record<string, LossConfigKey>> = {
  clip_low_threshold: { defaultValue: 0.8, rule: 'a ratio bound in [0, 1]', allows: (x) => x >= 0 && x <= 1 },
  clip_high_threshold: { defaultValue: 1.2, rule: 'a ratio bound >= 1', allows: (x) => x >= 1 },
};

/**
 * Config keys per loss. dro's `beta` has no documented default; 0.05 is the value of Tinker's own
 * example, so code written against the docs sees the same loss. A negative beta would reward moving
 * away from the sampler, so it must be >= 0 (0 is plain -logp * A).
 */
export const LOSS_FN_CONFIG: Readonly<Record<LossFn, Readonly<Record<string, LossConfigKey>>>> = {
  cross_entropy: {},
  importance_sampling: {},
  ppo: CLIP_BOUNDS,
  cispo: CLIP_BOUNDS,
  dro: { beta: { defaultValue: 0.05, rule: 'a finite number >= 0', allows: (x) => x >= 0 } },
};

/** A `loss_fn_config` value: a number, or (SDK 0.26+, `loss_fn_config_v2`) a string. */
export type LossConfigValue = number | string;

export type ResolvedLossConfig =
  | { readonly ok: true; readonly values: Readonly<Record<string, number>> }
  | { readonly ok: false; readonly key: string; readonly problem: string };

/**
 * A loss's config with defaults filled in, or the first key that is unknown to the loss, not a finite
 * number or outside its range. The caller turns a problem into its own error type (400 at intake, a
 * failed step at execution), naming `loss_fn_config.<key>`.
 */
export function resolveLossConfig(
  lossFn: LossFn,
  config: Readonly<Record<string, LossConfigValue>>,
): ResolvedLossConfig {
  const keys = LOSS_FN_CONFIG[lossFn];
  const allowed = Object.keys(keys);
  for (const [key, value] of Object.entries(config)) {
    const spec = Object.hasOwn(keys, key) ? keys[key] : undefined;
    if (spec === undefined) {
      const expected = allowed.length === 0 ? 'it takes no config keys' : `allowed: ${allowed.join(', ')}`;
      return { ok: false, key, problem: `not a config key of loss_fn ${lossFn} (${expected})` };
    }
    if (typeof value === 'string') {
      // loss_fn_config_v2 and SDK 0.26+ JSON allow text values; no key of these losses takes one.
      return {
        ok: false,
        key,
        problem: `must be a number (${spec.rule}), got the string ${JSON.stringify(value.slice(0, 64))}`,
      };
    }
    if (typeof value !== 'number' || !Number.isFinite(value) || !spec.allows(value)) {
      return { ok: false, key, problem: `must be ${spec.rule}, got ${value}` };
    }
  }
  const values: Record<string, number> = {};
  for (const [key, spec] of Object.entries(keys))
    values[key] = (config[key] as number | undefined) ?? spec.defaultValue;
  return { ok: true, values };
}
