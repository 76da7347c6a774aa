/**
 * A stored request payload as bytes, with the two facts needed to decode it later: its format and
 * its compression. The scheduler moves payloads as these (W4, R6: it copies the dispatched payloads'
 * bytes into the work item and never decodes them); only the worker decodes.
 */

/** `json`: canonical JSON (every request type). `tinker-pb`: a protobuf `ForwardBackwardRequest`. */
export type PayloadFormat = 'json' | 'tinker-pb';
export type PayloadCompression = 'zstd';

export const PAYLOAD_CONTENT_TYPES: Readonly<Record<PayloadFormat, string>> = {
  json: 'application/json',
  'tinker-pb': 'application/x-protobuf',
};

export class PayloadBytes {
  constructor(
    readonly bytes: Uint8Array,
    readonly format: PayloadFormat,
    readonly compression?: PayloadCompression,
  ) {}
}

export function isPayloadFormat(value: unknown): value is PayloadFormat {
  return value === 'json' || value === 'tinker-pb';
}

export function isPayloadCompression(value: unknown): value is PayloadCompression {
  return value === 'zstd';
}
