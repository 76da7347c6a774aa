import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { LOSS_VECTORS_FILE, lossVectorsJson, referenceLossVectors } from '../support/loss-vectors.js';

/**
 * The shared loss vectors (test/support/fixtures/loss-vectors.json) are what the reference backend computes
 * today, so the torch engine's test against the same file compares it with the reference (L1, G3).
 */
describe('shared loss test vectors', () => {
  it('the fixture file equals the reference losses (rewrite: node --import tsx test/support/loss-vectors.ts)', () => {
    expect(readFileSync(LOSS_VECTORS_FILE, 'utf8')).toBe(lossVectorsJson());
  });

  it('cover every loss, both target shapes, and clipped and unclipped ratios', () => {
    const vectors = referenceLossVectors();
    expect(new Set(vectors.map((v) => v.loss_fn))).toEqual(
      new Set(['cross_entropy', 'importance_sampling', 'ppo', 'cispo', 'dro']),
    );
    expect(vectors.some((v) => v.target_shape.length === 2)).toBe(true);
    const flags = vectors.flatMap((v) => v.expected.clipped ?? []);
    expect(flags).toContain(true);
    expect(flags).toContain(false);
    expect(vectors.flatMap((v) => v.expected.slopes)).toContain(0);
  });
});
