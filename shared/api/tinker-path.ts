import type { CheckpointKind } from '../domain/records.js';

/**
 * `tinker://` checkpoint paths. Training checkpoints (save_weights) are `tinker://<model_id>/weights/<name>`,
 * sampler checkpoints (save_weights_for_sampler) `tinker://<model_id>/<name>`.
 */
export interface CheckpointPath {
  readonly modelId: string;
  readonly kind: CheckpointKind;
  readonly name: string;
}

const SCHEME = 'tinker://';
const SEGMENT = /^[A-Za-z0-9_.:-]+$/;

export function formatCheckpointPath(path: CheckpointPath): string {
  return path.kind === 'weights'
    ? `${SCHEME}${path.modelId}/weights/${path.name}`
    : `${SCHEME}${path.modelId}/${path.name}`;
}

/** Parses a `tinker://` path; undefined when it is not one of the two shapes above. */
export function parseCheckpointPath(path: string): CheckpointPath | undefined {
  if (!path.startsWith(SCHEME)) return undefined;
  const segments = path.slice(SCHEME.length).split('/');
  if (!segments.every((segment) => SEGMENT.test(segment))) return undefined;
  const [modelId, second, third] = segments;
  if (segments.length === 2 && modelId && second) return { modelId, kind: 'sampler', name: second };
  if (segments.length === 3 && modelId && second === 'weights' && third) {
    return { modelId, kind: 'weights', name: third };
  }
  return undefined;
}
