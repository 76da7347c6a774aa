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

interface MediaRange {
  readonly type: string;
  readonly subtype: string;
  readonly q: number;
}

/** RFC 9110's qvalue: 0 to 1, at most three decimals. */
const QVALUE = /^(?:0(?:\.\d{0,3})?|1(?:\.0{0,3})?)$/;

/**
 * The media ranges of an `Accept` header (RFC 9110, section 12.5.1), lower case, each with its
 * weight; parameters other than `q` are ignored, and a range that is malformed or has a malformed
 * weight is dropped.
 */
function mediaRanges(accept: string): MediaRange[] {
  const ranges: MediaRange[] = [];
  for (const element of accept.split(',')) {
    const [range = '', ...parameters] = element.split(';').map((part) => part.trim().toLowerCase());
    const match = /^([!#$%&'*+.^_`|~0-9a-z-]+)\/([!#$%&'*+.^_`|~0-9a-z-]+)$/.exec(range);
    if (match === null) continue;
    let q = 1;
    let valid = true;
    for (const parameter of parameters) {
      const [name, value = ''] = parameter.split('=').map((part) => part.trim());
      if (name !== 'q') continue;
      if (QVALUE.test(value)) q = Number(value);
      else valid = false;
    }
    if (valid) ranges.push({ type: match[1] as string, subtype: match[2] as string, q });
  }
  return ranges;
}

/** The weight the most specific matching range gives `type/subtype` (RFC 9110: exact, type/*, then *\/*). */
function weightOf(ranges: readonly MediaRange[], type: string, subtype: string): number | undefined {
  const exact = ranges.find((range) => range.type === type && range.subtype === subtype);
  const ofType = ranges.find((range) => range.type === type && range.subtype === '*');
  const any = ranges.find((range) => range.type === '*' && range.subtype === '*');
  return (exact ?? ofType ?? any)?.q;
}

/**
 * Whether a result goes out as protobuf (W2): the `Accept` header names `application/x-protobuf`
 * itself (a wildcard keeps JSON, as clients that send `*\/*` expect) with a weight above 0 and at
 * least JSON's. The SDK sends `application/x-protobuf` (0.25) or `application/x-protobuf,
 * application/json` (0.24.1): both get protobuf.
 */
export function acceptsProtobuf(accept: string | undefined): boolean {
  if (accept === undefined) return false;
  const ranges = mediaRanges(accept);
  const [type, subtype] = PROTOBUF_CONTENT_TYPE.split('/') as [string, string];
  const named = ranges.find((range) => range.type === type && range.subtype === subtype);
  if (named === undefined || named.q === 0) return false;
  return named.q >= (weightOf(ranges, 'application', 'json') ?? 0);
}
