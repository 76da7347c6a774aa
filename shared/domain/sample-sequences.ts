import { isRequestId } from '../base/ids.js';

/**
 * Sampling ids (W8): sequence `i` of the sample submitted as request `r` is `r:i`. Minted at submit
 * from the request id, so a retried asample (which answers the original request id) answers the same
 * ids; unique because request ids are; in the order of the final sequences because a sample's
 * sequences keep their index. The tenant scope is the `sample#<r>` record (SampleSequencesRecord).
 */
export function sampleSequenceId(requestId: string, index: number): string {
  return `${requestId}:${index}`;
}

export function sampleSequenceIds(requestId: string, numSamples: number): string[] {
  return Array.from({ length: numSamples }, (_, index) => sampleSequenceId(requestId, index));
}

/** The request and sample index an id names, or undefined when it is not shaped like one we issue. */
export function parseSampleSequenceId(id: string): { requestId: string; index: number } | undefined {
  const match = /^([0-9a-f]{32}):(0|[1-9][0-9]{0,5})$/.exec(id);
  if (match === null || !isRequestId(match[1] as string)) return undefined;
  return { requestId: match[1] as string, index: Number(match[2]) };
}

/**
 * A sample result as a JSON client reads it: each sequence carries its `sequence_id`. The protobuf
 * SampleResponse has no such field; the SDK takes the ids from the asample answer instead.
 */
export function withSequenceIds(requestId: string, result: unknown): unknown {
  if (typeof result !== 'object' || result === null) return result;
  const { sequences } = result as { sequences?: unknown };
  if (!Array.isArray(sequences)) return result;
  return {
    ...result,
    sequences: sequences.map((sequence: unknown, index) =>
      typeof sequence === 'object' && sequence !== null
        ? { ...sequence, sequence_id: sampleSequenceId(requestId, index) }
        : sequence,
    ),
  };
}
