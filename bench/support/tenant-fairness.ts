import { DEFAULT_PLAN_LIMITS, type PlanLimits } from '../../shared/domain/planning/limits.js';
import type { Plan } from '../../shared/domain/planning/plan-types.js';
import { plan } from '../../shared/domain/planning/planner.js';
import type { LiveRow, ModelRow } from '../../shared/domain/records.js';

/**
 * The scene of hardening finding 1's measurement: one tenant's backlog of pending training requests
 * (a forward_backward and an optim_step per model, all submitted first) and another tenant's lone
 * forward_backward, submitted last. `dispatchOrder` plans it as one tick does (plan, claim what was
 * planned, plan again while a cap cut the plan short) and says where the lone request went.
 */

export interface FairnessScene {
  readonly live: LiveRow[];
  readonly models: ModelRow[];
  readonly loneRequestId: string;
}

export function fairnessScene(options: {
  /** Pending requests of the busy tenant: a forward_backward and an optim_step per model. */
  readonly backlog: number;
  readonly tokensPerRequest: number;
  /** Erase the tenants (the planner then orders oldest pending first, as before fairness). */
  readonly tenantBlind?: boolean;
}): FairnessScene {
  const tenant = (name: string) => (options.tenantBlind ? 'everyone' : name);
  const live: LiveRow[] = [];
  const models: ModelRow[] = [];
  const model = (modelId: string, owner: string): ModelRow => ({
    model_id: modelId,
    tenant: tenant(owner),
    session_id: `sess-${owner}`,
    base_model: 'reference/byte-lm',
    lora_config: { rank: 4 },
    status: 'active',
    epoch: 1,
    planned_through: 0,
    applied_through: 0,
    attempts: 0,
    created_at: 0,
  });
  let id = 0;
  const next = () => `r${String(++id).padStart(8, '0')}`;
  for (let i = 0; live.length < options.backlog; i++) {
    const modelId = `busy-${i}`;
    models.push(model(modelId, 'busy'));
    for (const [seq, type] of [
      [1, 'forward_backward'],
      [2, 'optim_step'],
    ] as const) {
      if (live.length >= options.backlog) break;
      live.push({
        request_id: next(),
        model_id: modelId,
        tenant: tenant('busy'),
        seq,
        request_type: type,
        status: 'pending',
        tokens: type === 'optim_step' ? 0 : options.tokensPerRequest,
      });
    }
  }
  models.push(model('lone-0', 'lone'));
  const loneRequestId = next();
  live.push({
    request_id: loneRequestId,
    model_id: 'lone-0',
    tenant: tenant('lone'),
    seq: 1,
    request_type: 'forward_backward',
    status: 'pending',
    tokens: options.tokensPerRequest,
  });
  return { live, models, loneRequestId };
}

export interface LoneDispatch {
  /** Work item (1-based) of the tick that carried the lone request. */
  readonly workItem: number;
  /** Its place among every request the tick dispatched, in dispatch order (1-based). */
  readonly position: number;
  /** Requests and tokens dispatched before it: what a worker runs before reaching it. */
  readonly requestsBefore: number;
  readonly tokensBefore: number;
  readonly workItems: number;
}

/** Plans the scene as one tick's passes do and finds the lone request in what they dispatch. */
export function dispatchOrder(scene: FairnessScene, limits: PlanLimits = DEFAULT_PLAN_LIMITS): LoneDispatch {
  const models = new Map(scene.models.map((row) => [row.model_id, row]));
  let position = 0;
  let tokensBefore = 0;
  let found: Omit<LoneDispatch, 'workItems'> | undefined;
  let workItems = 0;
  for (let round = 0; round < 1_000; round++) {
    const planned: Plan = plan({ live: scene.live, models, sampleClaims: new Set() }, limits, 0);
    if (planned.models.length === 0) break;
    workItems++;
    for (const model of planned.models) {
      for (const step of model.steps) {
        position++;
        if (step.request_id === scene.loneRequestId && found === undefined) {
          found = { workItem: workItems, position, requestsBefore: position - 1, tokensBefore };
        }
        tokensBefore += step.tokens;
      }
      // Claimed: in flight until its work item commits, which no tick waits for.
      const row = models.get(model.model_id)!;
      models.set(model.model_id, {
        ...row,
        planned_through: model.last_seq,
        inflight: `${model.model_id}@2`,
      });
    }
    if (!planned.cap_reached) break;
  }
  if (found === undefined) throw new Error('the lone request was never dispatched');
  return { ...found, workItems };
}
