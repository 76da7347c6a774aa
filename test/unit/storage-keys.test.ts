import { describe, expect, it } from 'vitest';
import { mintRunId } from '../../shared/base/ids.js';
import { checkpointContentId, parseRunKey, storageKeys } from '../../shared/base/storage-keys.js';

/** E3: every key a worker writes names its run, and the GC reads the run back out of it. */
describe('run-unique storage keys', () => {
  const model = 'model-0123abcd';
  const request = '0191a2b3c4d5e6f708192a3b4c5d6e7f';
  const content = checkpointContentId(request);

  it('mints a fresh 12-hex-digit run id each time', () => {
    const runs = new Set(Array.from({ length: 100 }, () => mintRunId()));
    expect(runs.size).toBe(100);
    for (const run of runs) expect(run).toMatch(/^[0-9a-f]{12}$/);
  });

  it('gives two runs of the same write different keys, and parses each back', () => {
    for (const run of ['a1b2c3d4e5f6', '0f0f0f0f0f0f']) {
      expect(parseRunKey(storageKeys.modelState(model, 7, run))).toEqual({
        kind: 'state',
        modelId: model,
        epoch: 7,
        run,
      });
      expect(parseRunKey(storageKeys.result(request, run))).toEqual({
        kind: 'result',
        requestId: request,
        run,
      });
      for (const kind of ['checkpoint', 'archive'] as const) {
        expect(parseRunKey(storageKeys[kind](model, content, run))).toEqual({
          kind,
          modelId: model,
          requestId: request,
          run,
        });
      }
    }
    expect(storageKeys.modelState(model, 7, 'a')).not.toBe(storageKeys.modelState(model, 7, 'b'));
  });

  it('parses no key of another layout: the GC leaves those to the rules of their time', () => {
    for (const key of [
      storageKeys.legacyModelState(model, 7),
      `results/${request}.json`,
      storageKeys.legacyCheckpoint(model, content),
      storageKeys.legacyArchive(model, content),
      storageKeys.payload(request),
      storageKeys.workItem('w-1'),
      `${storageKeys.checkpoint(model, content, 'a1')}.bak`,
      `state/${model}/seven/a1.bin`,
      `checkpoints/${model}/${request}/a1.bin`,
    ]) {
      expect(parseRunKey(key), key).toBeUndefined();
    }
  });
});
