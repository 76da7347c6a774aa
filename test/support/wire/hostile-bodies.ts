/**
 * The request bodies of issue 25's repros, built one way for the unit tests, the bad-input table and
 * fuzz suites, and the intake bench: each is small on the wire and declares far more work than its
 * size (frames, datums, issues), or holds a tensor shape the losses cannot use.
 */

/** An empty zstd frame: no content size, an 8 MiB window, one empty last raw block. */
export const EMPTY_ZSTD_FRAME = Uint8Array.of(0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x68, 0x01, 0x00, 0x00);

/** `count` empty frames back to back (20,000: 180 KB, the repro). */
export function emptyZstdFrames(count: number): Uint8Array {
  const out = new Uint8Array(EMPTY_ZSTD_FRAME.length * count);
  for (let i = 0; i < count; i++) out.set(EMPTY_ZSTD_FRAME, i * EMPTY_ZSTD_FRAME.length);
  return out;
}

/** A ForwardBackwardRequest of `count` empty datums (`1a 00` each; 2,500,000 in the repro). */
export function emptyProtobufDatums(count: number): Uint8Array {
  const out = new Uint8Array(2 * count);
  for (let i = 0; i < count; i++) out[2 * i] = 0x1a;
  return out;
}

/** One datum (`1a <len>`) holding `count` empty chunks (`0a 00` each). */
export function emptyProtobufChunks(count: number): Uint8Array {
  const chunks = emptyProtobufDatums(count).map((byte) => (byte === 0x1a ? 0x0a : byte));
  return Uint8Array.from([0x1a, ...varint(chunks.length), ...chunks]);
}

function varint(value: number): number[] {
  const out: number[] = [];
  let rest = value;
  while (rest >= 0x80) {
    out.push((rest % 0x80) | 0x80);
    rest = Math.floor(rest / 0x80);
  }
  out.push(rest);
  return out;
}

/** A JSON forward_backward whose `data` is `count` empty objects (400,000 in the repro: 1.2 MB). */
export function emptyJsonDatums(modelId: string, seqId: number, count: number): string {
  return `{"model_id":"${modelId}","seq_id":${seqId},"forward_backward_input":{"loss_fn":"cross_entropy","data":[${Array(
    count,
  )
    .fill('{}')
    .join(',')}]}}`;
}

/** A JSON cross_entropy datum of `tokens` whose target_tokens has `shape` (e.g. [4, 1, 1]). */
export function jsonDatumWithTargetShape(tokens: readonly number[], shape: readonly number[]) {
  return {
    model_input: { chunks: [{ type: 'encoded_text', tokens }] },
    loss_fn_inputs: { target_tokens: { data: tokens.map((t) => t + 1), dtype: 'int64', shape } },
  };
}

/** A shape of `rank` dimensions holding `size` values: [size, 1, 1, ...]. */
export function shapeOfRank(rank: number, size: number): number[] {
  return [size, ...Array<number>(rank - 1).fill(1)];
}
