/**
 * Matches a path (relative to the API prefix, e.g. `samplers/samp-1`) against route patterns whose
 * segments are literals or `{param}`s, each `{param}` matching exactly one non-empty segment. Routes
 * are looked up in a `Map` and parameters collected in a prototype-less object, so a request path
 * such as `constructor` or `__proto__` can never reach Object.prototype's members.
 */
export interface RouteMatch<R> {
  readonly route: R;
  /** Percent-decoded values, by the names the pattern gives them. */
  readonly params: Readonly<Record<string, string>>;
}

export interface RouteMatcher<R> {
  match(path: string): RouteMatch<R> | undefined;
}

type Segment = { readonly literal: string } | { readonly param: string };

interface Compiled<R> {
  readonly pattern: string;
  readonly segments: readonly Segment[];
  readonly route: R;
}

const PARAM = /^\{([A-Za-z_][A-Za-z0-9_]*)\}$/;

function compile<R>(pattern: string, route: R): Compiled<R> {
  const seen = new Set<string>();
  const segments = pattern.split('/').map((part): Segment => {
    const param = PARAM.exec(part)?.[1];
    if (param === undefined) {
      if (part === '' || /[{}]/.test(part)) throw new Error(`route ${pattern}: bad segment "${part}"`);
      return { literal: part };
    }
    if (seen.has(param)) throw new Error(`route ${pattern}: parameter ${param} appears twice`);
    seen.add(param);
    return { param };
  });
  return { pattern, segments, route };
}

/** Literal before parameter at the first position where two same-length patterns differ. */
function bySpecificity<R>(a: Compiled<R>, b: Compiled<R>): number {
  for (let i = 0; i < Math.min(a.segments.length, b.segments.length); i++) {
    const aParam = 'param' in (a.segments[i] as Segment);
    const bParam = 'param' in (b.segments[i] as Segment);
    if (aParam !== bParam) return aParam ? 1 : -1;
  }
  return 0;
}

/** `{param}` shape of a pattern, to refuse two patterns that would match the same paths. */
function shape(segments: readonly Segment[]): string {
  return segments.map((segment) => ('literal' in segment ? `=${segment.literal}` : '*')).join('/');
}

export function compileRoutes<R>(table: Readonly<Record<string, R>>): RouteMatcher<R> {
  const exact = new Map<string, R>();
  const patterns: Compiled<R>[] = [];
  const shapes = new Map<string, string>();
  for (const [pattern, route] of Object.entries(table)) {
    const compiled = compile(pattern, route);
    const key = shape(compiled.segments);
    const clash = shapes.get(key);
    if (clash !== undefined) throw new Error(`routes ${clash} and ${pattern} match the same paths`);
    shapes.set(key, pattern);
    if (compiled.segments.every((segment) => 'literal' in segment)) exact.set(pattern, route);
    else patterns.push(compiled);
  }
  patterns.sort(bySpecificity);
  return {
    match(path) {
      const fixed = exact.get(path);
      if (fixed !== undefined) return { route: fixed, params: Object.create(null) };
      const parts = path.split('/');
      for (const candidate of patterns) {
        const params = matchSegments(candidate.segments, parts);
        if (params !== undefined) return { route: candidate.route, params };
      }
      return undefined;
    },
  };
}

function matchSegments(
  segments: readonly Segment[],
  parts: readonly string[],
): Record<string, string> | undefined {
  if (segments.length !== parts.length) return undefined;
  const params: Record<string, string> = Object.create(null);
  for (let i = 0; i < segments.length; i++) {
    const segment = segments[i] as Segment;
    const part = parts[i] as string;
    if ('literal' in segment) {
      if (part !== segment.literal) return undefined;
      continue;
    }
    const value = decodeSegment(part);
    // An empty value, or one that decodes to a separator, names no single resource.
    if (value === undefined || value === '' || value.includes('/')) return undefined;
    params[segment.param] = value;
  }
  return params;
}

function decodeSegment(part: string): string | undefined {
  try {
    return decodeURIComponent(part);
  } catch {
    return undefined; // a malformed escape such as `%E0%A4%A`
  }
}
