import { InfrastructureError } from '../../base/errors.js';
import type { BackendState } from '../backend.js';

export const REFERENCE_STATE_KIND = 'reference-lora';

/** The reference backend's model state. Arrays are never mutated once a state is returned. */
export interface ReferenceState extends BackendState {
  readonly kind: typeof REFERENCE_STATE_KIND;
  readonly rank: number;
  /** Adam's step counter t (bias correction); reset by load_weights without optimizer. */
  readonly adam_step: number;
  /** Adapter weights: A (DIM x rank) then B (rank x DIM). */
  readonly params: Float64Array;
  /** Adam first and second moments; null before the first optimizer step. */
  readonly moment1: Float64Array | null;
  readonly moment2: Float64Array | null;
  /** Gradient summed over forward_backward calls since the last optim_step; null when none. */
  readonly grad: Float64Array | null;
}

export function asReferenceState(state: BackendState): ReferenceState {
  if (state.kind !== REFERENCE_STATE_KIND) {
    throw new InfrastructureError(`reference backend got a state of kind ${state.kind}`);
  }
  return state as ReferenceState;
}
