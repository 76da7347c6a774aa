import type { CheckpointKind } from './records.js';

/**
 * `tinker://` checkpoint paths (W5). Every path the server issues has the SDK's shape, which its
 * `ParsedCheckpointTinkerPath` requires: training checkpoints (save_weights) are
 * `tinker://<model_id>/weights/<name>`, sampler checkpoints (save_weights_for_sampler, named or not)
 * `tinker://<model_id>/sampler_weights/<name>`. The parser also accepts the sampler form this server
 * issued before, `tinker://<model_id>/<name>`: clients hold such paths and name records still store
 * them, so they resolve for as long as the checkpoint lives.
 */
export interface CheckpointPath {
  readonly modelId: string;
  readonly kind: CheckpointKind;
  readonly name: string;
}

const SCHEME = 'tinker://';
const SEGMENT = /^[A-Za-z0-9_.:-]+$/;

/** The path segment naming each kind, as the SDK spells it. */
const KIND_SEGMENT: Readonly<Record<CheckpointKind, string>> = {
  weights: 'weights',
  sampler: 'sampler_weights',
};

/** Equivalent of the SDK's check (docs/design.md#w5), for tests of what the server issues. */
export const SDK_TINKER_PATH = /^tinker:\/\/([^/]*)\/(weights|sampler_weights)\/([^/]*)$/;

export function formatCheckpointPath(path: CheckpointPath): string {
  return `${SCHEME}${path.modelId}/${KIND_SEGMENT[path.kind]}/${path.name}`;
}

/** Parses a `tinker://` path; undefined when it is none of the three shapes above. */
export function parseCheckpointPath(path: string): CheckpointPath | undefined {
  if (!path.startsWith(SCHEME)) return undefined;
  const segments = path.slice(SCHEME.length).split('/');
  if (!segments.every((segment) => SEGMENT.test(segment))) return undefined;
  const [modelId, second, third] = segments;
  if (modelId === undefined || second === undefined) return undefined;
  // Legacy sampler form. A name such as `weights` is fine here: the current forms have three segments.
  if (segments.length === 2) return { modelId, kind: 'sampler', name: second };
  if (segments.length !== 3 || third === undefined) return undefined;
  if (second === KIND_SEGMENT.weights) return { modelId, kind: 'weights', name: third };
  if (second === KIND_SEGMENT.sampler) return { modelId, kind: 'sampler', name: third };
  return undefined;
}
