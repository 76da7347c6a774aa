/**
 * Bounded descriptions of client input for error messages. A message never stringifies structure the
 * client controls (a 6,000-deep array overflowed the stack in JSON.stringify) and never echoes more than
 * a short excerpt (a 5 MB string of quotes came back as a 10 MB answer, over Lambda's 6 MB limit).
 */

const EXCERPT_CHARS = 32;
const SEGMENT_CHARS = 64;
const FIELD_CHARS = 256;
/** An error message's whole length; far below any response limit. */
export const MESSAGE_MAX_CHARS = 1024;

function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}... (${text.length} chars)`;
}

/** What a value is, in a few words: a short number or string excerpt, else only its kind. */
export function describeValue(value: unknown): string {
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint')
    return String(value);
  if (typeof value === 'string') return JSON.stringify(clip(value, EXCERPT_CHARS));
  if (value === null) return 'null';
  if (Array.isArray(value)) return `an array of ${value.length}`;
  return typeof value === 'object' ? 'an object' : typeof value;
}

/** A field path for messages: each member name and the whole path bounded. */
export function describeField(path: readonly PropertyKey[]): string {
  if (path.length === 0) return 'body';
  return clip(path.map((segment) => clip(String(segment), SEGMENT_CHARS)).join('.'), FIELD_CHARS);
}

export function boundMessage(message: string): string {
  return clip(message, MESSAGE_MAX_CHARS);
}
