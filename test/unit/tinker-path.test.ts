import { describe, expect, it } from 'vitest';
import {
  type CheckpointPath,
  formatCheckpointPath,
  parseCheckpointPath,
  SDK_TINKER_PATH,
} from '../../shared/domain/tinker-path.js';

const weights: CheckpointPath = { modelId: 'model-1', kind: 'weights', name: 'step-10' };
const sampler: CheckpointPath = { modelId: 'model-1', kind: 'sampler', name: 'final' };

describe('tinker:// paths (W5)', () => {
  it('are issued in the SDK forms and round-trip', () => {
    expect(formatCheckpointPath(weights)).toBe('tinker://model-1/weights/step-10');
    expect(formatCheckpointPath(sampler)).toBe('tinker://model-1/sampler_weights/final');
    for (const path of [weights, sampler])
      expect(parseCheckpointPath(formatCheckpointPath(path))).toEqual(path);
  });

  it('every issued path satisfies the SDK parser, whatever the (valid) model id and name', () => {
    const ids = ['model-1', 'sess:train:17', 'model-0123abcd.x_y'];
    const names = ['a', 'weights', 'sampler_weights', 'samp-0123456789abcdef0123456789abcdef', 'x.y-z_1'];
    for (const modelId of ids) {
      for (const name of names) {
        for (const kind of ['weights', 'sampler'] as const) {
          const path = formatCheckpointPath({ modelId, kind, name });
          const match = SDK_TINKER_PATH.exec(path);
          expect(match, path).not.toBeNull();
          expect(match?.slice(1)).toEqual([
            modelId,
            kind === 'weights' ? 'weights' : 'sampler_weights',
            name,
          ]);
        }
      }
    }
  });

  it('accepts the legacy sampler form tinker://<model_id>/<name>', () => {
    expect(parseCheckpointPath('tinker://model-1/final')).toEqual(sampler);
    // A legacy name that spells a kind segment is still a name: the current forms have three segments.
    expect(parseCheckpointPath('tinker://model-1/weights')).toEqual({ ...sampler, name: 'weights' });
    expect(parseCheckpointPath('tinker://model-1/sampler_weights')).toEqual({
      ...sampler,
      name: 'sampler_weights',
    });
  });

  it('a legacy and a current sampler path name the same checkpoint', () => {
    expect(parseCheckpointPath('tinker://model-1/final')).toEqual(
      parseCheckpointPath('tinker://model-1/sampler_weights/final'),
    );
  });

  it('rejects other shapes', () => {
    for (const path of [
      '',
      'model-1/final',
      'tinker://',
      'tinker://model-1',
      'tinker://model-1/',
      'tinker:///final',
      'tinker://model-1/a/b',
      'tinker://model-1/Weights/a',
      'tinker://model-1/weights/',
      'tinker://model-1/sampler_weights/',
      'tinker://model-1/weights/a/b',
      'tinker://model-1/sampler_weights/a/b',
      'tinker://mo#del/final',
      'tinker://model-1/weights/a b',
      'TINKER://model-1/weights/a',
      's3://model-1/final',
    ]) {
      expect(parseCheckpointPath(path), path).toBeUndefined();
    }
  });
});
