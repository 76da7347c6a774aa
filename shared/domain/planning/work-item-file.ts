import { InfrastructureError } from '../../base/errors.js';
import { isPayloadCompression, isPayloadFormat, PayloadBytes } from '../../base/payload-bytes.js';

/**
 * The work item's S3 object: a JSON header followed by the dispatched payloads' bytes, so the
 * scheduler copies payloads in without decoding them and the worker decodes each one itself (W4).
 *
 *   "TSW1" | u32 LE header length | header (UTF-8 JSON) | payload bytes, back to back
 *
 * In the header, each step or sample whose payload is a `PayloadBytes` carries
 * `payload_ref: {offset, length, format, compression?}` (offset from the end of the header) in its
 * place. Anything else in `payload` (tests build work items by value) stays inline as JSON. Objects
 * that start with `{` are work items written before this layout, read as plain JSON.
 */

const MAGIC = new Uint8Array([0x54, 0x53, 0x57, 0x31]); // "TSW1"
const PREAMBLE_BYTES = MAGIC.length + 4;

interface PayloadRef {
  readonly offset: number;
  readonly length: number;
  readonly format: string;
  readonly compression?: string;
}

/** A step or sample entry, as far as its payload goes. */
export type Entry = Record<string, unknown> & { payload?: unknown };

export interface ItemShape {
  readonly models?: readonly { readonly steps?: readonly Entry[] }[];
  readonly samples?: readonly Entry[];
}

/** Every step and sample entry of a work item (or of its file's header), in file order. */
export function entriesOf(item: ItemShape): Entry[] {
  return [...(item.models ?? []).flatMap((model) => model.steps ?? []), ...(item.samples ?? [])];
}

/** The object's bytes for a work item (validated by the caller). */
export function encodeWorkItemFile(item: ItemShape): Uint8Array {
  const blobs: Uint8Array[] = [];
  let offset = 0;
  const withRefs = (entry: Entry): Entry => {
    if (!(entry.payload instanceof PayloadBytes)) return entry;
    const { payload, ...rest } = entry;
    const ref: PayloadRef = {
      offset,
      length: payload.bytes.length,
      format: payload.format,
      ...(payload.compression === undefined ? {} : { compression: payload.compression }),
    };
    blobs.push(payload.bytes);
    offset += payload.bytes.length;
    return { ...rest, payload_ref: ref };
  };
  const header = {
    ...item,
    models: (item.models ?? []).map((model) => ({ ...model, steps: (model.steps ?? []).map(withRefs) })),
    samples: (item.samples ?? []).map(withRefs),
  };
  const headerBytes = new TextEncoder().encode(JSON.stringify(header));
  const file = new Uint8Array(PREAMBLE_BYTES + headerBytes.length + offset);
  file.set(MAGIC, 0);
  new DataView(file.buffer).setUint32(MAGIC.length, headerBytes.length, true);
  file.set(headerBytes, PREAMBLE_BYTES);
  let at = PREAMBLE_BYTES + headerBytes.length;
  for (const blob of blobs) {
    file.set(blob, at);
    at += blob.length;
  }
  return file;
}

function isRef(value: unknown): value is PayloadRef {
  if (typeof value !== 'object' || value === null) return false;
  const ref = value as Record<string, unknown>;
  return (
    Number.isSafeInteger(ref.offset) && Number.isSafeInteger(ref.length) && typeof ref.format === 'string'
  );
}

/**
 * The work item as a plain value (to be checked with `workItemSchema`), payloads as `PayloadBytes`
 * views into `file`. Throws `InfrastructureError` for bytes that are not a work item file.
 */
export function decodeWorkItemFile(file: Uint8Array): unknown {
  const text = new TextDecoder();
  if (file[0] === 0x7b) return JSON.parse(text.decode(file)) as unknown;
  if (file.length < PREAMBLE_BYTES || MAGIC.some((byte, index) => file[index] !== byte)) {
    throw new InfrastructureError('not a work item file (bad magic)');
  }
  const headerLength = new DataView(file.buffer, file.byteOffset, file.byteLength).getUint32(
    MAGIC.length,
    true,
  );
  const blobsStart = PREAMBLE_BYTES + headerLength;
  if (blobsStart > file.length) throw new InfrastructureError('work item header runs past the end');
  const header = JSON.parse(text.decode(file.subarray(PREAMBLE_BYTES, blobsStart))) as ItemShape;
  for (const entry of entriesOf(header)) {
    const ref = entry.payload_ref;
    if (ref === undefined) continue;
    if (!isRef(ref) || !isPayloadFormat(ref.format)) throw new InfrastructureError('malformed payload_ref');
    if (ref.compression !== undefined && !isPayloadCompression(ref.compression)) {
      throw new InfrastructureError(`unknown payload compression ${ref.compression}`);
    }
    const start = blobsStart + ref.offset;
    if (ref.offset < 0 || ref.length < 0 || start + ref.length > file.length) {
      throw new InfrastructureError('payload_ref points outside the file');
    }
    delete entry.payload_ref;
    entry.payload = new PayloadBytes(
      file.subarray(start, start + ref.length),
      ref.format,
      isPayloadCompression(ref.compression) ? ref.compression : undefined,
    );
  }
  return header;
}
