import { expect } from 'vitest';

/**
 * `actual` equals `expected` structurally, with every number within `tolerance` (absolute up to 1,
 * relative beyond): how answers computed by a float32 engine in different batches compare (R1 on an
 * engine holds within a stated tolerance, not bit for bit).
 */
export function expectClose(actual: unknown, expected: unknown, tolerance: number, where = 'answer'): void {
  if (typeof expected === 'number') {
    expect(typeof actual, where).toBe('number');
    const scale = Math.max(1, Math.abs(expected));
    expect(Math.abs((actual as number) - expected), where).toBeLessThanOrEqual(tolerance * scale);
  } else if (Array.isArray(expected)) {
    expect(Array.isArray(actual), where).toBe(true);
    expect((actual as unknown[]).length, where).toBe(expected.length);
    for (const [i, item] of expected.entries())
      expectClose((actual as unknown[])[i], item, tolerance, `${where}.${i}`);
  } else if (expected instanceof Map) {
    expect(actual instanceof Map, where).toBe(true);
    expectClose(
      Object.fromEntries(actual as Map<unknown, unknown>),
      Object.fromEntries(expected),
      tolerance,
      where,
    );
  } else if (expected !== null && typeof expected === 'object') {
    expect(Object.keys(actual as object).sort(), where).toEqual(Object.keys(expected).sort());
    for (const [key, item] of Object.entries(expected)) {
      expectClose((actual as Record<string, unknown>)[key], item, tolerance, `${where}.${key}`);
    }
  } else {
    expect(actual, where).toEqual(expected);
  }
}
