import { createHash } from 'node:crypto';

/**
 * Keys in the `prefixes` table. Row keys carry the writer's attempt, so one attempt's rollback or
 * late retry can only ever touch its own rows (P2). Components are URI-encoded so a `#` inside an id
 * cannot make two keys collide.
 */
const part = (value: string | number): string => encodeURIComponent(String(value));

export function rowItemKey(callId: string, attempt: string, cut: number, chunk: number): string {
  return `row#${part(callId)}#${part(attempt)}#${part(cut)}#${part(chunk)}`;
}

/**
 * The group's commit record. Derived from the attempt and the keys of the group's members (each
 * call's first row key: one per call, attempt and cut, known before the row is encoded, so a group's
 * rows can be written while later ones are still being encoded). The writer's commit and any abort
 * of that group name the same record, and no two groups (of any attempt) share one.
 */
export function groupKey(attempt: string, memberKeys: readonly string[]): string {
  const digest = createHash('sha256')
    .update(JSON.stringify([...memberKeys].sort()))
    .digest('hex')
    .slice(0, 32);
  return `group#${part(attempt)}#${digest}`;
}
