import { BARRIER_TYPES, PASS_TYPES, type RequestType } from '../records.js';

export function isPass(type: RequestType): boolean {
  return PASS_TYPES.has(type);
}

export function isBarrier(type: RequestType): boolean {
  return BARRIER_TYPES.has(type);
}

/**
 * R2: the length of the longest prefix of one model's run (in seq order) that holds no pass after a
 * barrier. Equal to SkyRL's "passes before the first barrier, plus single requests before the first
 * blocked pass": both end exactly at the first pass that follows a barrier.
 */
export function tickPrefixLength(types: readonly RequestType[]): number {
  let barrierSeen = false;
  for (let index = 0; index < types.length; index++) {
    const type = types[index]!;
    if (barrierSeen && isPass(type)) return index;
    if (isBarrier(type)) barrierSeen = true;
  }
  return types.length;
}
