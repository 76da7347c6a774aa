import { invalidField } from '../../base/errors.js';

/**
 * The query string, parsed once at the edge (shared/services/api/router.ts) for the GET routes that take
 * parameters (the listings, C1). Each parameter keeps every value it was sent with, so a repeated one
 * is refused instead of silently taking the first or the last.
 */
export type QueryParams = Readonly<Record<string, readonly string[]>>;

export function parseQuery(raw: string | undefined): QueryParams {
  const params: Record<string, string[]> = Object.create(null);
  if (raw === undefined || raw === '') return params;
  for (const [name, value] of new URLSearchParams(raw)) {
    const values = params[name];
    if (values === undefined) params[name] = [value];
    else values.push(value);
  }
  return params;
}

/** A parameter's one value; undefined when absent; a 400 naming it when repeated. */
function single(query: QueryParams, name: string): string | undefined {
  const values = query[name];
  if (values === undefined) return undefined;
  if (values.length !== 1) throw invalidField(name, `given ${values.length} times; give it once`);
  return values[0];
}

/** Digits only, as the SDK sends them: no sign, exponent, fraction or spaces. */
const DIGITS = /^[0-9]{1,15}$/;

/** An integer parameter in [min, max], or `fallback` when absent. */
export function integerParam(
  query: QueryParams,
  name: string,
  bounds: { readonly min: number; readonly max: number; readonly fallback: number },
): number {
  const raw = single(query, name);
  if (raw === undefined) return bounds.fallback;
  const value = DIGITS.test(raw) ? Number(raw) : Number.NaN;
  if (!Number.isSafeInteger(value) || value < bounds.min || value > bounds.max) {
    const range =
      bounds.max === Number.MAX_SAFE_INTEGER ? `>= ${bounds.min}` : `${bounds.min}..${bounds.max}`;
    throw invalidField(name, `must be an integer ${range}, got "${raw.slice(0, 32)}"`);
  }
  return value;
}

/** One of `values`, or `fallback` when absent. */
export function choiceParam<T extends string>(
  query: QueryParams,
  name: string,
  values: readonly T[],
  fallback: T,
): T {
  const raw = single(query, name);
  if (raw === undefined) return fallback;
  if (!(values as readonly string[]).includes(raw)) {
    throw invalidField(name, `must be one of ${values.join(', ')}, got "${raw.slice(0, 32)}"`);
  }
  return raw as T;
}
