import fc from 'fast-check';

/**
 * One fast-check seed for the whole run (a vitest setup file). vitest.config.ts picks it: `FC_SEED`
 * when set, else one derived from the commit checked out, so a commit's property tests draw the same
 * cases on every machine and a CI failure replays anywhere (fast-check prints the seed; run the
 * suite with `FC_SEED=<seed>`). Each new commit explores new cases. Tests that pin their own seed keep it.
 */
const seed = process.env.FC_SEED;
if (seed !== undefined && seed !== '') {
  const value = Number(seed);
  if (!Number.isSafeInteger(value)) throw new Error(`FC_SEED must be an integer, got "${seed}"`);
  fc.configureGlobal({ ...fc.readConfigureGlobal(), seed: value });
}
