import { requestIdTime } from '../../base/ids.js';
import type { PlanLimits } from './limits.js';
import type { HeldModel, PlannedStep, RunStop } from './plan-types.js';

/**
 * S5: one SDK step, one work item. The SDK sends a step's `forward_backward` and, once that submit
 * is answered, its `optim_step`; a tick woken by the first would dispatch it alone, and the step would
 * cost two work items. So a model whose run ends with a `forward_backward` submitted less than the window ago, with
 * nothing after it yet, is held back until the window ends: a tick that plans it again by then (a
 * fresh read, R5) finds the barrier and sends both together. Holding changes when a run is
 * dispatched, never what it holds or in which order (R1-R3): the held model's whole run waits, and
 * the next plan starts from the same `planned_through`. A run ending with a `forward` is not held:
 * no barrier belongs to a forward (it accumulates nothing), so the wait would only add latency.
 */

/** How many windows past its oldest step's submit a run may be held (so a stream of passes cannot hold it forever). */
export const OLDEST_STEP_WINDOWS = 2;

/**
 * Until when a model's proposed run waits for more of its SDK step, or undefined to plan it now.
 * Held only while all of these hold: the window is on; the run ends with a forward_backward that
 * runs (no fail step) and nothing visible follows it (`end_of_run`: not cut by a barrier or a cap,
 * after which nothing more could join); the run is below the per-model step cap. The hold ends the
 * window after that forward_backward's submit, at most `OLDEST_STEP_WINDOWS` windows after its
 * oldest step's, and never more than one window after `now` (submit times come from the API's
 * clock, not this one).
 */
export function holdUntil(
  steps: readonly PlannedStep[],
  stop: RunStop,
  limits: Pick<PlanLimits, 'maxStepsPerModel'>,
  now: number,
  windowMs: number,
): number | undefined {
  if (windowMs <= 0 || stop !== 'end_of_run') return undefined;
  const last = steps[steps.length - 1];
  if (last === undefined || steps.length >= limits.maxStepsPerModel) return undefined;
  if (last.request_type !== 'forward_backward' || steps.some((step) => step.fail !== undefined))
    return undefined;
  let oldest = Number.POSITIVE_INFINITY;
  for (const step of steps) oldest = Math.min(oldest, requestIdTime(step.request_id));
  const until = Math.min(
    requestIdTime(last.request_id) + windowMs,
    oldest + OLDEST_STEP_WINDOWS * windowMs,
    now + windowMs,
  );
  // An id that is not time-ordered (NaN) never holds.
  return until > now ? until : undefined;
}

/** How long a tick waits before it looks at its held models again: until the earliest hold ends, at most `capMs`. */
export function holdWait(held: Iterable<HeldModel>, now: number, capMs: number): number | undefined {
  let earliest = Number.POSITIVE_INFINITY;
  for (const model of held) earliest = Math.min(earliest, model.until);
  if (earliest === Number.POSITIVE_INFINITY) return undefined;
  return Math.min(capMs, Math.max(0, Math.ceil(earliest - now)));
}
