import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { anchorsOf } from '../support/markdown.js';

/**
 * Comments and test names cite contract tags (R5, E4, P4a...), sections of docs/design.md and sections
 * of the other documents (docs/api.md#routes, bench/README.md#e2e); a newcomer must find each one there.
 * These checks keep the documents and the code from drifting apart. Links inside the documents are
 * checked by test/unit/doc-links.test.ts.
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SOURCE_DIRS = ['shared', 'functions', 'local', 'bench', 'test', 'cdk', 'bin'];
const SOURCE_FILE = /\.(ts|proto|py)$/;
const THIS_FILE = relative(ROOT, fileURLToPath(import.meta.url));

interface SourceLine {
  readonly file: string;
  readonly line: number;
  readonly text: string;
  /** The line's comment text, if it has one. */
  readonly comment?: string;
}

/** The comment text of one source line: a whole comment line, or what follows a trailing `//`. */
function commentOf(line: string, python: boolean): string | undefined {
  const trimmed = line.trim();
  if (python) return trimmed.startsWith('#') ? trimmed : undefined;
  if (trimmed.startsWith('//') || trimmed.startsWith('*') || trimmed.startsWith('/*')) return trimmed;
  const trailing = line.indexOf(' // ');
  return trailing === -1 ? undefined : line.slice(trailing);
}

function sourceLines(): SourceLine[] {
  const found: SourceLine[] = [];
  for (const dir of SOURCE_DIRS) {
    for (const entry of readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })) {
      const file = join(dir, entry);
      if (!SOURCE_FILE.test(file) || file === THIS_FILE) continue;
      const python = file.endsWith('.py');
      readFileSync(join(ROOT, file), 'utf8')
        .split('\n')
        .forEach((text, index) => {
          const comment = commentOf(text, python);
          found.push({ file, line: index + 1, text, ...(comment === undefined ? {} : { comment }) });
        });
    }
  }
  return found;
}

const DESIGN = readFileSync(join(ROOT, 'docs/design.md'), 'utf8');
const ANCHORS = new Set([...DESIGN.matchAll(/<a id="([a-z0-9-]+)"><\/a>/g)].map((match) => match[1]));
const LINES = sourceLines();

/** A contract tag: a family letter, a number, maybe a letter (`P4a`); not part of `%E0` or `AwsSolutions-L1`. */
const TAG = /(?<![\w%.-])([REPWCLG][0-9]+[a-z]?)(?!\w)/g;

function where(line: SourceLine): string {
  return `${line.file}:${line.line}`;
}

describe('docs/design.md and the comments that cite it', () => {
  it('finds the contract tags in the code (the scan itself works)', () => {
    const tags = new Set(LINES.flatMap((line) => [...line.text.matchAll(TAG)].map((match) => match[1])));
    for (const tag of ['R5', 'E4', 'P4a', 'W4', 'L2']) expect(tags).toContain(tag);
    expect(LINES.filter((line) => line.comment?.includes('(docs/design.md#limits)'))).not.toEqual([]);
  });

  it('has a section for every contract tag the code cites', () => {
    const missing = LINES.flatMap((line) =>
      [...line.text.matchAll(TAG)]
        .map((match) => match[1] ?? '')
        .filter((tag) => !ANCHORS.has(tag.toLowerCase()))
        .map((tag) => `${where(line)} cites ${tag}`),
    );
    expect(missing).toEqual([]);
  });

  it('has every section the code links to (docs/design.md#anchor)', () => {
    const missing = LINES.flatMap((line) =>
      [...line.text.matchAll(/docs\/design\.md#([a-z0-9-]+)/g)]
        .map((match) => match[1] ?? '')
        .filter((anchor) => !ANCHORS.has(anchor))
        .map((anchor) => `${where(line)} links #${anchor}`),
    );
    expect(missing).toEqual([]);
  });

  it('states every family of the brief, each tag in its own section', () => {
    const expected = [
      ...['r', 'e'].flatMap((family) => [1, 2, 3, 4, 5, 6, 7].map((n) => `${family}${n}`)),
      ...[1, 2, 3, 4, '4a', 5, 6].map((n) => `p${n}`),
      ...['w', 'c', 'g'].flatMap((family) => [1, 2, 3, 4, 5, 6].map((n) => `${family}${n}`)),
      ...[1, 2, 3, 4].map((n) => `l${n}`),
    ];
    expect(expected.filter((anchor) => !ANCHORS.has(anchor))).toEqual([]);
  });

  it('has every document and section the code links to (docs/*.md#anchor, bench/README.md#anchor)', () => {
    const cited = /\b((?:docs\/[a-z0-9-]+|bench\/README|engines\/[a-z0-9-]+\/README)\.md)#([a-z0-9_-]+)/g;
    const anchors = new Map<string, Set<string> | undefined>();
    const anchorsOfFile = (file: string): Set<string> | undefined => {
      if (!anchors.has(file)) {
        const path = join(ROOT, file);
        anchors.set(file, existsSync(path) ? anchorsOf(readFileSync(path, 'utf8')) : undefined);
      }
      return anchors.get(file);
    };
    const links = LINES.flatMap((line) =>
      [...line.text.matchAll(cited)].map((match) => ({ line, file: match[1] ?? '', anchor: match[2] ?? '' })),
    );
    expect(links.filter((link) => link.file !== 'docs/design.md')).not.toEqual([]);
    const missing = links
      .filter((link) => anchorsOfFile(link.file)?.has(link.anchor) !== true)
      .map((link) => `${where(link.line)} links ${link.file}#${link.anchor}`);
    expect(missing).toEqual([]);
  });

  it('no comment cites a section of the README (the documents under docs/ hold them)', () => {
    const citing = LINES.filter(
      (line) => line.comment !== undefined && /\bREADME,? ["“']|\bsee README\b/.test(line.comment),
    ).map(where);
    expect(citing).toEqual([]);
  });

  it('no comment cites a document kept outside the repository', () => {
    const outside = /REFERENCE\.md|REFERENCE section|ARCHITECTURE|TINKER-SURFACE|tinker-wire-schema|seeds\//;
    const citing = LINES.filter((line) => line.comment !== undefined && outside.test(line.comment)).map(
      where,
    );
    expect(citing).toEqual([]);
  });
});
