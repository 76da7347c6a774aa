/**
 * S3 key layout. Every key a worker writes is unique to its run (E3): the model and epoch, or the
 * request id, plus the run id the worker mints when it starts a work item (`mintRunId`). Two
 * deliveries of one work item share its epoch but never a key, so a commit names exactly the bytes its
 * own run wrote, whatever the backend. Readers take these keys from the committed rows, never derive
 * them. IAM grants are per top-level prefix.
 */
export const storageKeys = {
  payload: (requestId: string) => `payloads/${requestId}.json`,
  workItem: (workItemId: string) => `work/${workItemId}.json`,
  result: (requestId: string, run: string) => `results/${requestId}/${run}.json`,
  modelState: (modelId: string, epoch: number, run: string) => `state/${modelId}/${epoch}/${run}.bin`,
  checkpoint: (modelId: string, contentId: string, run: string) =>
    `checkpoints/${modelId}/${contentId}/${run}.bin`,
  /** The checkpoint's tar (C2), built once from its blob; what the archive route's presigned URL names. */
  archive: (modelId: string, contentId: string, run: string) => `archives/${modelId}/${contentId}/${run}.tar`,
  /** A model state written before runs were in keys (still readable: a row names it). */
  legacyModelState: (modelId: string, epoch: number) => `state/${modelId}/${epoch}.bin`,
  /** A checkpoint committed before name records held `blob_key`: one key per content, no run. */
  legacyCheckpoint: (modelId: string, contentId: string) => `checkpoints/${modelId}/${contentId}.bin`,
  /** The archive the archive route builds for a checkpoint saved before archives were built at save. */
  legacyArchive: (modelId: string, contentId: string) => `archives/${modelId}/${contentId}.tar`,
} as const;

/** Content id of a checkpoint, derived from the request that saves it (E4). */
export function checkpointContentId(requestId: string): string {
  return `c-${requestId}`;
}

/** The request a content id was derived from (`checkpointContentId`), or undefined for another form. */
export function checkpointRequestId(contentId: string): string | undefined {
  return contentId.startsWith('c-') ? contentId.slice(2) : undefined;
}

/** What a key of a run-unique layout names; undefined for any other key (the GC leaves it alone). */
export type RunObject =
  | { readonly kind: 'state'; readonly modelId: string; readonly epoch: number; readonly run: string }
  | { readonly kind: 'result'; readonly requestId: string; readonly run: string }
  | {
      readonly kind: 'checkpoint' | 'archive';
      readonly modelId: string;
      readonly requestId: string;
      readonly run: string;
    };

const SEGMENT = '[^/]+';
const RUN_KEYS = {
  state: new RegExp(`^state/(${SEGMENT})/(\\d+)/(${SEGMENT})\\.bin$`),
  result: new RegExp(`^results/(${SEGMENT})/(${SEGMENT})\\.json$`),
  checkpoint: new RegExp(`^checkpoints/(${SEGMENT})/c-(${SEGMENT})/(${SEGMENT})\\.bin$`),
  archive: new RegExp(`^archives/(${SEGMENT})/c-(${SEGMENT})/(${SEGMENT})\\.tar$`),
} as const;

/** Parses a key of the run-unique layouts above; only keys the layout gives back unchanged. */
export function parseRunKey(key: string): RunObject | undefined {
  const parsed = parseLoosely(key);
  if (parsed === undefined) return undefined;
  const rebuilt =
    parsed.kind === 'state'
      ? storageKeys.modelState(parsed.modelId, parsed.epoch, parsed.run)
      : parsed.kind === 'result'
        ? storageKeys.result(parsed.requestId, parsed.run)
        : storageKeys[parsed.kind](parsed.modelId, checkpointContentId(parsed.requestId), parsed.run);
  return rebuilt === key ? parsed : undefined;
}

function parseLoosely(key: string): RunObject | undefined {
  const state = RUN_KEYS.state.exec(key);
  if (state !== null) return { kind: 'state', modelId: state[1]!, epoch: Number(state[2]), run: state[3]! };
  const result = RUN_KEYS.result.exec(key);
  if (result !== null) return { kind: 'result', requestId: result[1]!, run: result[2]! };
  for (const kind of ['checkpoint', 'archive'] as const) {
    const match = RUN_KEYS[kind].exec(key);
    if (match !== null) return { kind, modelId: match[1]!, requestId: match[2]!, run: match[3]! };
  }
  return undefined;
}
