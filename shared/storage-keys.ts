/**
 * S3 key layout. Every key a worker writes is unique to (model, epoch) or to a request id (E3),
 * so nothing a zombie writes can be mistaken for committed data. IAM grants are per prefix.
 */
export const storageKeys = {
  payload: (requestId: string) => `payloads/${requestId}.json`,
  result: (requestId: string) => `results/${requestId}.json`,
  workItem: (workItemId: string) => `work/${workItemId}.json`,
  modelState: (modelId: string, epoch: number) => `state/${modelId}/${epoch}.bin`,
  checkpoint: (modelId: string, contentId: string) => `checkpoints/${modelId}/${contentId}.bin`,
  /** The checkpoint's tar (C2), built once from its blob; what the archive route's presigned URL names. */
  archive: (modelId: string, contentId: string) => `archives/${modelId}/${contentId}.tar`,
} as const;

/** Content id of a checkpoint, derived from the request that saves it (E4). */
export function checkpointContentId(requestId: string): string {
  return `c-${requestId}`;
}
