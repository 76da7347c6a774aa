import type { Tunables } from '../../base/config.js';
import type { IntakeStore } from '../../repositories/intake/run-intake.js';
import type { SdkFeatures } from './sdk-versions.js';

/**
 * What every API operation runs with: the intake's clients and tables, the caller's tenant (never
 * taken from ids in the body), the request's time, the tunables, and the SDK release it is answered as.
 * Its own module so the operations spread over this folder share it without importing each other.
 */
export interface OperationContext extends IntakeStore {
  readonly tenant: string;
  readonly now: number;
  readonly tunables: Tunables;
  /** What the calling SDK release is answered (W7); absent: the newest answers. */
  readonly sdkFeatures?: SdkFeatures;
}
