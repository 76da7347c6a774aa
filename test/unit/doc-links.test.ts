import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { anchorsOf, githubSlug, linesOutsideFences } from '../support/markdown.js';

/**
 * Every relative link in the project's documentation resolves: the README, docs/*.md, bench/README.md
 * and each engine's README (engines/**\/README.md). A link's file must exist and, when it names a
 * `#fragment`, that file must have a heading whose GitHub anchor is the fragment or an `<a id>` of it.
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

function documents(): string[] {
  const found = ['README.md', 'bench/README.md'];
  for (const entry of readdirSync(join(ROOT, 'docs'))) if (entry.endsWith('.md')) found.push(`docs/${entry}`);
  for (const entry of readdirSync(join(ROOT, 'engines'), { recursive: true, encoding: 'utf8' })) {
    const file = join('engines', entry);
    if (file.endsWith('/README.md') && !file.includes('node_modules')) found.push(file);
  }
  return found;
}

/** The document's text outside fenced code blocks and inline code, where links are not links. */
function proseOf(markdown: string): string {
  return linesOutsideFences(markdown)
    .map((line) => line.replace(/`[^`]*`/g, ''))
    .join('\n');
}

interface Link {
  readonly document: string;
  readonly target: string;
}

function linksOf(document: string): Link[] {
  const prose = proseOf(readFileSync(join(ROOT, document), 'utf8'));
  const targets = [
    ...[...prose.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map((match) => match[1] ?? ''),
    ...[...prose.matchAll(/^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$/gm)].map(
      (match) => match[1] ?? '',
    ),
    ...[...prose.matchAll(/<a\s[^>]*href="([^"]+)"/g)].map((match) => match[1] ?? ''),
  ];
  return targets
    .filter((target) => !/^[a-z][a-z0-9+.-]*:/i.test(target))
    .map((target) => ({ document, target }));
}

/** Why a link does not resolve, or undefined when it does. */
function brokenBecause(link: Link): string | undefined {
  const hashAt = link.target.indexOf('#');
  const pathPart = hashAt === -1 ? link.target : link.target.slice(0, hashAt);
  const fragment = hashAt === -1 ? undefined : decodeURIComponent(link.target.slice(hashAt + 1));
  const file =
    pathPart === '' ? link.document : relative(ROOT, join(ROOT, dirname(link.document), decodeURI(pathPart)));
  if (file.startsWith('..')) return `${file} is outside the repository`;
  if (!existsSync(join(ROOT, file))) return `${file} does not exist`;
  if (fragment === undefined || fragment === '') return undefined;
  if (statSync(join(ROOT, file)).isDirectory()) return `${file} is a folder, it has no #${fragment}`;
  if (!file.endsWith('.md')) return /^L\d+(-L\d+)?$/.test(fragment) ? undefined : `${file} is not markdown`;
  return anchorsOf(readFileSync(join(ROOT, file), 'utf8')).has(fragment)
    ? undefined
    : `${file} has no heading or <a id> for #${fragment}`;
}

const DOCUMENTS = documents();
const LINKS = DOCUMENTS.flatMap(linksOf);

describe('documentation links', () => {
  it('slugs headings as GitHub does', () => {
    expect(githubSlug('Deploy to AWS')).toBe('deploy-to-aws');
    expect(githubSlug('local-cloud (`bench/results/local-cloud.json`)')).toBe(
      'local-cloud-benchresultslocal-cloudjson',
    );
    expect(githubSlug('Checkpoints: archive, TTL, publish, delete')).toBe(
      'checkpoints-archive-ttl-publish-delete',
    );
    expect(githubSlug('<a id="r1"></a>R1 Sequential equivalence')).toBe('r1-sequential-equivalence');
    expect(githubSlug('SDK 0.25.0 and `forward_backward`')).toBe('sdk-0250-and-forward_backward');
  });

  it('finds the documents and their links (the scan itself works)', () => {
    for (const document of ['README.md', 'docs/design.md', 'docs/api.md', 'bench/README.md']) {
      expect(DOCUMENTS).toContain(document);
    }
    expect(DOCUMENTS.some((document) => document.startsWith('engines/'))).toBe(true);
    expect(LINKS.filter((link) => link.document === 'README.md').map((link) => link.target)).toContain(
      'docs/limitations.md',
    );
    expect(LINKS.some((link) => link.target.includes('#'))).toBe(true);
  });

  it('has no dead relative link or anchor', () => {
    const dead = LINKS.flatMap((link) => {
      const reason = brokenBecause(link);
      return reason === undefined ? [] : [`${link.document}: (${link.target}) ${reason}`];
    });
    expect(dead).toEqual([]);
  });

  it('catches a dead file and a dead anchor', () => {
    expect(brokenBecause({ document: 'README.md', target: 'docs/no-such-doc.md' })).toMatch(/does not exist/);
    const deadAnchor = ['docs/design.md', 'no-such-tag'].join('#');
    expect(brokenBecause({ document: 'README.md', target: deadAnchor })).toMatch(/no heading/);
    expect(brokenBecause({ document: 'docs/api.md', target: 'design.md#r5' })).toBeUndefined();
  });
});
