/**
 * Reading markdown as GitHub renders it, for the tests that keep the documentation's links and the
 * code's citations of it alive (test/unit/doc-links.test.ts, test/unit/design-doc.test.ts).
 */

/** The lines outside fenced code blocks (inline code kept: a heading's code is part of its anchor). */
export function linesOutsideFences(markdown: string): string[] {
  const lines: string[] = [];
  let fence: string | undefined;
  for (const line of markdown.split('\n')) {
    const marker = /^\s*(```|~~~)/.exec(line)?.[1];
    if (fence === undefined && marker !== undefined) fence = marker;
    else if (fence !== undefined && marker === fence) fence = undefined;
    else if (fence === undefined) lines.push(line);
  }
  return lines;
}

/** GitHub's anchor for a heading: its text, lower case, punctuation dropped, spaces made hyphens. */
export function githubSlug(heading: string): string {
  const text = heading
    .replace(/<[^>]*>/g, '')
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/[`*~]/g, '');
  return text
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

/** A document's anchors: each heading's slug (repeats numbered `-1`, `-2` as GitHub does) and `<a id>`s. */
export function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of linesOutsideFences(markdown)) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)?.[1];
    if (heading !== undefined) {
      const slug = githubSlug(heading);
      const count = seen.get(slug) ?? 0;
      seen.set(slug, count + 1);
      anchors.add(count === 0 ? slug : `${slug}-${count}`);
    }
    for (const match of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(match[1] ?? '');
  }
  return anchors;
}
