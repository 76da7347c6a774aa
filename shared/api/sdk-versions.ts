/**
 * Which answers each Tinker SDK release gets (W7), from the version it names: the
 * `X-Stainless-Package-Version` header the SDK's HTTP client sends on every request (0.24.1 and 0.25.0
 * both send it), and for `client/config` its body's `sdk_version` first. Pure. Releases up to 0.25.0 get
 * exactly the answers they got before W8. The asample answer's `sample_sequence_ids`, which newer
 * releases require, goes to every other client, one that names no version included; a JSON sample
 * result's per-sequence `sequence_id` only to a client that names a newer release, so a plain HTTP
 * client's results keep the shape they had (it reads the ids from the asample answer).
 */

export type SdkVersion = readonly [number, number, number];

/** `major.minor.patch` with anything after the patch (pre-release, build) ignored; else undefined. */
export function parseSdkVersion(text: string | undefined): SdkVersion | undefined {
  const match = text === undefined ? null : /^v?(\d{1,6})\.(\d{1,6})\.(\d{1,6})/.exec(text.trim());
  if (match === null) return undefined;
  return [Number(match[1]), Number(match[2]), Number(match[3])];
}

function atMost(version: SdkVersion, limit: SdkVersion): boolean {
  for (let i = 0; i < 3; i++) {
    if ((version[i] as number) !== (limit[i] as number)) return (version[i] as number) < (limit[i] as number);
  }
  return true;
}

/** The last release before sampling ids, provenance and the newer sampling outputs. */
const LAST_BEFORE_W8: SdkVersion = [0, 25, 0];

export interface SdkFeatures {
  /** `asample` answers `sample_sequence_ids` (W8). */
  readonly sampleSequenceIds: boolean;
  /** JSON sample results carry each sequence's `sequence_id` (W8). */
  readonly resultSequenceIds: boolean;
  /** The config answers carry the flags releases after 0.25.0 read (`sdkConfigFlags`). */
  readonly newerConfigFlags: boolean;
}

export function sdkFeatures(versionText: string | undefined): SdkFeatures {
  const version = parseSdkVersion(versionText);
  const legacy = version !== undefined && atMost(version, LAST_BEFORE_W8);
  return {
    sampleSequenceIds: !legacy,
    resultSequenceIds: version !== undefined && !legacy,
    newerConfigFlags: !legacy,
  };
}

/** What `client/config` and `client/dynamic_config` add to their fixed fields for one release. */
export interface SdkConfigFlags {
  readonly clientConfig: { readonly sample_use_retrieve_futures?: boolean };
  readonly dynamicConfig: { readonly sample_cancel_enabled: boolean };
}

/**
 * The per-release flags of the SDK's config answers: the one place a flag is decided. The SDK takes a
 * missing flag as false, so `false` is written only to releases that read the flag; releases up to
 * 0.25.0 get exactly the answers they got before W7.
 */
export function sdkConfigFlags(features: SdkFeatures): SdkConfigFlags {
  return {
    // One long poll per sampling session (POST retrieve_futures) is not offered.
    clientConfig: features.newerConfigFlags ? { sample_use_retrieve_futures: false } : {},
    // Every release has been answered this (0.24.1 and 0.25.0 ignore it): cancel_future is not offered.
    dynamicConfig: { sample_cancel_enabled: false },
  };
}
