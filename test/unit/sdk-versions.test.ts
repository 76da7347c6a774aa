import { describe, expect, it } from 'vitest';
import {
  parseSampleSequenceId,
  sampleSequenceIds,
  withSequenceIds,
} from '../../shared/domain/sample-sequences.js';
import { clientConfig, clientDynamicConfig } from '../../shared/services/api/capabilities.js';
import { parseSdkVersion, sdkConfigFlags, sdkFeatures } from '../../shared/services/api/sdk-versions.js';

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

describe('the config answers per release (W7)', () => {
  const tunables = { maxDatums: 64, maxBodyBytes: 1 << 20 };
  const flags = (version: string | undefined) => sdkConfigFlags(sdkFeatures(version));
  const config = (version: string | undefined) => clientConfig(tunables, flags(version).clientConfig);

  it('0.24.1, 0.25.0 and a client naming no release get the client/config they always got', () => {
    for (const version of ['0.24.1', '0.25.0', '0.25.9', 'not a version', undefined]) {
      expect(config(version)).toEqual({
        use_pyqwest_transport: false,
        parallel_fwdbwd_chunks: false,
        proto_compress_fwdbwd: true,
        fwdbwd_max_chunk_len: 64,
        fwdbwd_max_chunk_bytes_count: 1 << 20,
      });
    }
  });

  it('session futures and clone ids (W9) are advertised to 0.26.0 and later', () => {
    for (const version of ['0.26.0', '0.32.0.dev3', '1.0.0rc1']) {
      expect(config(version)).toMatchObject({
        sample_use_retrieve_futures: true,
        sample_join_sampling_session: true,
      });
    }
  });

  it('cancellation is advertised to every release', () => {
    for (const version of ['0.24.1', '0.32.0', undefined]) {
      expect(clientDynamicConfig(flags(version).dynamicConfig)).toEqual({
        refresh_interval_sec: 300,
        sample_cancel_enabled: true,
        sample_cancel_max_batch_size: 64,
      });
    }
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
