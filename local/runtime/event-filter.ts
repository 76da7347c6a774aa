import type { FilterPattern, FilterValue } from '../../shared/base/topology.js';

/**
 * Lambda event filtering (the EventBridge pattern grammar), for the subset the topology uses:
 * nested objects, lists of exact values (strings, numbers) and `{ exists: boolean }`.
 *
 * A pattern matches when every key it names matches; a list matches when any of its values does.
 * `exists` looks at leaves only, as on AWS: `{ exists: true }` needs a present non-object value,
 * `{ exists: false }` needs the value absent. A path through a missing object counts as absent.
 * Arrays in the event match when any element matches.
 */
export function matchesPattern(event: unknown, pattern: FilterPattern): boolean {
  return Object.entries(pattern).every(([key, expected]) => {
    const actual = isObject(event) ? event[key] : undefined;
    if (isValueList(expected)) return expected.some((value) => matchesValue(actual, value));
    return matchesPattern(isObject(actual) ? actual : undefined, expected);
  });
}

/** Lambda delivers a record when it matches any of the trigger's patterns (all, if none is given). */
export function matchesAnyPattern(event: unknown, patterns: readonly FilterPattern[]): boolean {
  return patterns.length === 0 || patterns.some((pattern) => matchesPattern(event, pattern));
}

function matchesValue(actual: unknown, expected: FilterValue): boolean {
  if (Array.isArray(actual)) {
    if (typeof expected === 'object') return expected.exists === actual.length > 0;
    return actual.some((element) => matchesValue(element, expected));
  }
  if (typeof expected === 'object') {
    const isLeaf = actual !== undefined && !isObject(actual);
    return expected.exists === isLeaf;
  }
  return actual === expected;
}

function isValueList(value: FilterPattern | readonly FilterValue[]): value is readonly FilterValue[] {
  return Array.isArray(value);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
