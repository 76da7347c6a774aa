import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Limiter } from '../../shared/aws/limiter.js';

describe('Limiter', () => {
  it('never runs more than its concurrency at once, runs every task, and starts them in order', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 5 }),
        fc.array(fc.integer({ min: 0, max: 3 }), { maxLength: 30 }),
        async (concurrency, delays) => {
          const limiter = new Limiter(concurrency);
          let active = 0;
          let peak = 0;
          const startOrder: number[] = [];
          const results = await Promise.all(
            delays.map((delay, index) =>
              limiter
                .run(async () => {
                  startOrder.push(index);
                  active += 1;
                  peak = Math.max(peak, active);
                  await new Promise((resolve) => setTimeout(resolve, delay));
                  active -= 1;
                  if (delay === 3) throw new Error('task failed');
                  return index;
                })
                .catch(() => -1),
            ),
          );
          expect(peak).toBeLessThanOrEqual(concurrency);
          expect(startOrder).toEqual(delays.map((_, index) => index));
          expect(results).toEqual(delays.map((delay, index) => (delay === 3 ? -1 : index)));
        },
      ),
      { numRuns: 30 },
    );
  });
});
