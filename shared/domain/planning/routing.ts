import type { ModelRow } from '../records.js';
import type { Plan } from './plan-types.js';

/**
 * Where a plan's work items go (S2 of docs/design.md#s1): the work of a model whose state a worker
 * holds goes to that worker's lane queue while its hold is live (`holder_until` ahead), so the state
 * is used where it lives; everything else (models nobody holds, holders without a lane, expired
 * holds, and every sample) goes to the shared `work` queue. Pure: decided from the rows the tick
 * already read (R5); a hold that ends after the read costs only a rebuild on whichever worker runs it
 * (the worker checks its own state against the row, never trusts the route).
 */

/** The lane a model's work item goes to now, or undefined for the shared queue. */
export function laneOf(
  row: Pick<ModelRow, 'holder' | 'holder_until'> | undefined,
  now: number,
): number | undefined {
  const lane = row?.holder?.lane;
  if (lane === undefined || (row?.holder_until ?? 0) <= now) return undefined;
  return lane;
}

/** One work item's worth of a plan and its queue. */
export interface RoutedPlan {
  /** Undefined: the shared queue. */
  readonly lane: number | undefined;
  readonly plan: Plan;
}

/**
 * The plan split by destination, each part keeping the plan's order: the shared queue's part first
 * (with every sample), then one part per lane in lane order. A part with nothing in it is left out.
 */
export function routePlan(plan: Plan, models: ReadonlyMap<string, ModelRow>, now: number): RoutedPlan[] {
  const byLane = new Map<number | undefined, Plan['models'][number][]>();
  for (const model of plan.models) {
    const lane = laneOf(models.get(model.model_id), now);
    const part = byLane.get(lane) ?? [];
    part.push(model);
    byLane.set(lane, part);
  }
  const parts: RoutedPlan[] = [];
  const shared = byLane.get(undefined) ?? [];
  if (shared.length > 0 || plan.samples.length > 0) {
    parts.push({ lane: undefined, plan: { ...plan, models: shared } });
  }
  const lanes = [...byLane.keys()].filter((lane): lane is number => lane !== undefined).sort((a, b) => a - b);
  for (const lane of lanes) {
    parts.push({ lane, plan: { ...plan, models: byLane.get(lane) ?? [], samples: [], held: [] } });
  }
  return parts;
}
