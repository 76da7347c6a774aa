/**
 * Request and answer bodies that are not JSON: the SDK 0.25 sends `forward_backward` as protobuf
 * and takes Forward, ForwardBackward and Sample results as protobuf (W1, W2). The router hands a
 * route a `ProtobufBody` only if the route accepts one; a route answers a `BinaryAnswer` to have
 * its bytes sent as they are.
 */

export const PROTOBUF_CONTENT_TYPE = 'application/x-protobuf';

/** A protobuf request body, decompressed and within the body limit; `compressed` as received, if it was. */
export class ProtobufBody {
  constructor(
    readonly bytes: Uint8Array,
    readonly compressed?: Uint8Array,
  ) {}
}

export class BinaryAnswer {
  constructor(
    readonly contentType: string,
    readonly bytes: Uint8Array,
  ) {}
}

/** An answer with its own status and headers (the archive's 302 with `Location`, C2); `body` is JSON. */
export class HttpAnswer {
  constructor(
    readonly status: number,
    readonly body: unknown,
    readonly headers: Readonly<Record<string, string>>,
  ) {}
}

/** True when an `Accept` header lists the protobuf type (the SDK sends it with other types). */
export function acceptsProtobuf(accept: string | undefined): boolean {
  return accept?.toLowerCase().includes(PROTOBUF_CONTENT_TYPE) === true;
}
