/**
 * Readers of an SDK command's input as a middleware sees it, before the document client marshals:
 * plain values from the document client, attribute values (`{ S: ... }`) from the low-level one.
 * Shared by the grant enforcement's IAM requests (iam-requests.ts) and the write wake-ups
 * (write-wakes.ts), which both read keys out of any DynamoDB call.
 */

export type Input = Readonly<Record<string, unknown>>;

/** A key attribute's value with its type, as a stream record's `Keys` carry it. */
export type KeyAttribute = { readonly S: string } | { readonly N: string };

export function record(value: unknown): Input {
  return typeof value === 'object' && value !== null ? (value as Input) : {};
}

export function list(value: unknown): readonly unknown[] {
  return Array.isArray(value) ? value : [];
}

/** A string or number key attribute, from either client's input; undefined for anything else. */
export function keyAttribute(value: unknown): KeyAttribute | undefined {
  if (typeof value === 'string') return { S: value };
  if (typeof value === 'number' || typeof value === 'bigint') return { N: String(value) };
  const typed = record(value);
  if (typeof typed.S === 'string') return { S: typed.S };
  if (typeof typed.N === 'string') return { N: typed.N };
  return undefined;
}
