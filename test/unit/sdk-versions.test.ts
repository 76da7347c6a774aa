import { describe, expect, it } from 'vitest';
import { parseSdkVersion, sdkFeatures } from '../../shared/api/sdk-versions.js';
import {
  parseSampleSequenceId,
  sampleSequenceIds,
  withSequenceIds,
} from '../../shared/domain/sample-sequences.js';

describe('SDK versions (W7)', () => {
  it('parses major.minor.patch and ignores what follows', () => {
    expect(parseSdkVersion('0.25.0')).toEqual([0, 25, 0]);
    expect(parseSdkVersion('0.32.0rc1')).toEqual([0, 32, 0]);
    expect(parseSdkVersion('latest')).toBeUndefined();
    expect(parseSdkVersion(undefined)).toBeUndefined();
  });

  it('releases up to 0.25.0 get no sampling ids; newer ones and unnamed clients do', () => {
    expect(sdkFeatures('0.24.1').sampleSequenceIds).toBe(false);
    expect(sdkFeatures('0.25.0').sampleSequenceIds).toBe(false);
    expect(sdkFeatures('0.25.1').sampleSequenceIds).toBe(true);
    expect(sdkFeatures('0.32.0').sampleSequenceIds).toBe(true);
    expect(sdkFeatures('1.0.0').sampleSequenceIds).toBe(true);
    expect(sdkFeatures(undefined).sampleSequenceIds).toBe(true);
    // Results keep their shape for a client that names no release.
    expect(sdkFeatures(undefined).resultSequenceIds).toBe(false);
    expect(sdkFeatures('0.25.0').resultSequenceIds).toBe(false);
    expect(sdkFeatures('0.32.0').resultSequenceIds).toBe(true);
  });
});

describe('sample sequence ids (W8)', () => {
  const requestId = '0190a1b2c3d4e5f60718293a4b5c6d7e';
  it('one per sample, in order, and parsed back', () => {
    const ids = sampleSequenceIds(requestId, 3);
    expect(ids).toEqual([`${requestId}:0`, `${requestId}:1`, `${requestId}:2`]);
    expect(parseSampleSequenceId(ids[2] as string)).toEqual({ requestId, index: 2 });
    for (const bad of ['req:0', `${requestId}:01`, `${requestId}:-1`, `${requestId}`, `x${requestId}:0`]) {
      expect(parseSampleSequenceId(bad)).toBeUndefined();
    }
  });

  it('a JSON result carries each sequence id', () => {
    const result = { type: 'sample', sequences: [{ tokens: [1] }, { tokens: [2] }] };
    expect(withSequenceIds(requestId, result)).toEqual({
      type: 'sample',
      sequences: [
        { tokens: [1], sequence_id: `${requestId}:0` },
        { tokens: [2], sequence_id: `${requestId}:1` },
      ],
    });
  });
});
