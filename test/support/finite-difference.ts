import { expect } from 'vitest';

/**
 * Checks an analytic gradient against central finite differences of `loss`, weight by weight:
 * each within an absolute-plus-relative tolerance, the gradient not trivially small, and the whole
 * difference small relative to it (`relativeError`).
 */
export async function expectMatchesFiniteDifferences(
  loss: (params: Float64Array) => Promise<number>,
  params: Float64Array,
  grad: Float64Array,
  bounds: { readonly minNorm: number; readonly relativeError: number },
): Promise<void> {
  const h = 1e-5;
  let diffSquares = 0;
  let gradSquares = 0;
  for (let i = 0; i < grad.length; i++) {
    const plus = params.slice();
    const minus = params.slice();
    plus[i] = (plus[i] as number) + h;
    minus[i] = (minus[i] as number) - h;
    const numeric = ((await loss(plus)) - (await loss(minus))) / (2 * h);
    const analytic = grad[i] as number;
    expect(Math.abs(numeric - analytic)).toBeLessThan(1e-6 + 1e-5 * Math.abs(numeric));
    diffSquares += (numeric - analytic) ** 2;
    gradSquares += analytic ** 2;
  }
  expect(Math.sqrt(gradSquares)).toBeGreaterThan(bounds.minNorm);
  expect(Math.sqrt(diffSquares / gradSquares)).toBeLessThan(bounds.relativeError);
}
