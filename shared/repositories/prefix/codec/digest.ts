import { createHash } from 'node:crypto';

/**
 * Digests: sha256 per stored item, and a chain hash per prefix that binds every cut of a call, in
 * order, to the call and its checkpoint, so a reader can tell a whole lineage from a spliced one.
 */

export const DIGEST_BYTES = 32;

export function sha256(bytes: Uint8Array): Uint8Array {
  return new Uint8Array(createHash('sha256').update(bytes).digest());
}

export function sha256Hex(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/**
 * `body`'s sha256, and the sha256 of `body` followed by that digest (a stored item: its body and its
 * trailer), in one pass over the body: the second hash resumes from a copy of the first one's state.
 */
export function sha256WithTrailer(body: Uint8Array): {
  readonly trailer: Uint8Array;
  readonly wholeHex: string;
} {
  const hash = createHash('sha256').update(body);
  const whole = hash.copy();
  const trailer = new Uint8Array(hash.digest());
  return { trailer, wholeHex: whole.update(trailer).digest('hex') };
}

export function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Chain hash before a call's first cut. */
export function genesisChain(callId: string, contentId: string): string {
  return createHash('sha256')
    .update('prefix-genesis/v1\n')
    .update(JSON.stringify([callId, contentId]))
    .digest('hex');
}

/** Chain hash after one cut: the previous chain, the cut's index and its items' digests, in order. */
export function nextChain(previousChain: string, cut: number, itemDigests: readonly string[]): string {
  return createHash('sha256')
    .update('prefix-chain/v1\n')
    .update(JSON.stringify([previousChain, cut, itemDigests]))
    .digest('hex');
}
