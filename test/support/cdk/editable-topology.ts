import { type Topology, topology } from '../../../shared/base/topology.js';

export type Mutable<T> = T extends string | number | boolean
  ? T
  : { -readonly [K in keyof T]: Mutable<T[K]> };

/** A deep, writable copy of the declared topology, for tests that build a variant of it. */
export function editableTopology(): Mutable<Topology> {
  return structuredClone(topology) as Mutable<Topology>;
}
