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

/** Negative, zero or positive as `a` is before, the same as, or after `b`. */
function compareVersions(a: SdkVersion, b: SdkVersion): number {
  for (let i = 0; i < 3; i++) {
    if ((a[i] as number) !== (b[i] as number)) return (a[i] as number) - (b[i] as number);
  }
  return 0;
}

/** The last release before sampling ids, provenance and the newer sampling outputs. */
const LAST_BEFORE_W8: SdkVersion = [0, 25, 0];

/** The first release whose sampling client reads the session-futures flags. */
const FIRST_WITH_SESSION_FUTURES: SdkVersion = [0, 26, 0];

export interface SdkFeatures {
  /** `asample` answers `sample_sequence_ids` (W8). */
  readonly sampleSequenceIds: boolean;
  /** JSON sample results carry each sequence's `sequence_id` (W8). */
  readonly resultSequenceIds: boolean;
  /**
   * The client's sampling client reads the session-futures flags (W9): a client naming 0.26.0 or
   * later. An older client, or one naming no release, is never told to change how it polls.
   */
  readonly sessionFutures: boolean;
}

export function sdkFeatures(versionText: string | undefined): SdkFeatures {
  const version = parseSdkVersion(versionText);
  const legacy = version !== undefined && compareVersions(version, LAST_BEFORE_W8) <= 0;
  return {
    sampleSequenceIds: !legacy,
    resultSequenceIds: version !== undefined && !legacy,
    sessionFutures: version !== undefined && compareVersions(version, FIRST_WITH_SESSION_FUTURES) >= 0,
  };
}

/** What `client/config` and `client/dynamic_config` add to their fixed fields for one release. */
export interface SdkConfigFlags {
  readonly clientConfig: {
    readonly sample_use_retrieve_futures?: true;
    readonly sample_join_sampling_session?: true;
  };
  readonly dynamicConfig: {
    readonly sample_cancel_enabled: boolean;
    readonly sample_cancel_max_batch_size: number;
  };
}

/**
 * The per-release flags of the SDK's config answers: the one place a flag is decided. Session futures
 * and server-allocated clone ids (W9) go only to the releases that use them; cancellation (`cancel_future`:
 * a queued sample is dropped, a running one finishes, up to the SDK's default batch of 64 at once) to
 * every release, those before the flag ignoring it.
 */
export function sdkConfigFlags(features: SdkFeatures): SdkConfigFlags {
  return {
    clientConfig: features.sessionFutures
      ? { sample_use_retrieve_futures: true, sample_join_sampling_session: true }
      : {},
    dynamicConfig: { sample_cancel_enabled: true, sample_cancel_max_batch_size: 64 },
  };
}
