import { existsSync, readdirSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * The edges of the module graph: the entry points in bin/ sit above local/, whose three parts stack
 * as the cloud emulation (local/cloud), the local runtime on it (local/runtime) and the demos on both
 * (local/demos); no production code (shared/, functions/, cdk/) imports local/; neither bin/ nor local/
 * has an import cycle; and the benchmarks import only shared test support, never a suite or a suite's
 * own helper. Relative imports only (packages cannot point back in).
 */

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const FOLDERS = ['bin', 'bench', 'cdk', 'functions', 'local', 'shared', 'test'];
const IMPORT = /^\s*(?:import|export)\s[^;]*?\sfrom\s+'(\.{1,2}\/[^']+)'/gm;

/** Repository-relative path of every TypeScript module -> the repository modules it imports. */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const folder of FOLDERS) {
    for (const entry of readdirSync(path.join(ROOT, folder), { recursive: true, encoding: 'utf8' })) {
      if (!entry.endsWith('.ts') || entry.split(path.sep).includes('node_modules')) continue;
      const file = path.join(folder, entry);
      const source = readFileSync(path.join(ROOT, file), 'utf8');
      const imports = [...source.matchAll(IMPORT)]
        .map((match) => path.join(path.dirname(file), (match[1] ?? '').replace(/\.js$/, '.ts')))
        .filter((target) => existsSync(path.join(ROOT, target)));
      graph.set(file, imports);
    }
  }
  return graph;
}

/** Strongly connected components of more than one module (or a module importing itself). */
function cycles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  const order = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (node: string): void => {
    order.set(node, order.size);
    low.set(node, order.get(node) ?? 0);
    stack.push(node);
    onStack.add(node);
    for (const next of graph.get(node) ?? []) {
      if (!order.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node) ?? 0, low.get(next) ?? 0));
      } else if (onStack.has(next)) {
        low.set(node, Math.min(low.get(node) ?? 0, order.get(next) ?? 0));
      }
    }
    if (low.get(node) !== order.get(node)) return;
    const component: string[] = [];
    for (let member = stack.pop(); member !== undefined; member = stack.pop()) {
      onStack.delete(member);
      component.push(member);
      if (member === node) break;
    }
    if (component.length > 1 || (graph.get(node) ?? []).includes(node)) found.push(component.sort());
  };
  for (const node of graph.keys()) if (!order.has(node)) visit(node);
  return found;
}

const inFolder = (file: string, folder: string): boolean => file.startsWith(`${folder}${path.sep}`);

describe('import graph', () => {
  const graph = importGraph();

  it('finds the modules and their imports', () => {
    expect(graph.get(path.join('bin', 'worker.ts'))).toContain(
      path.join('local', 'runtime', 'worker-scope.ts'),
    );
    expect(
      cycles(
        new Map([
          ['a', ['b']],
          ['b', ['c']],
          ['c', ['a']],
          ['d', ['a']],
        ]),
      ),
    ).toEqual([['a', 'b', 'c']]);
  });

  it('has no cycle through bin/ or local/', () => {
    const edges = cycles(graph).filter((component) =>
      component.some((file) => inFolder(file, 'bin') || inFolder(file, 'local')),
    );
    expect(edges).toEqual([]);
  });

  it('stacks local/ as cloud, runtime, demos, and keeps production code off it', () => {
    const parts = ['cloud', 'runtime', 'demos'].map((part) => path.join('local', part));
    const misplaced = [...graph]
      .filter(([file]) => inFolder(file, 'local'))
      .filter(([file]) => !parts.some((part) => inFolder(file, part)))
      .map(([file]) => file);
    expect(misplaced).toEqual([]);
    const wrong = [...graph].flatMap(([file, imports]) => {
      const production = ['shared', 'functions', 'cdk'].some((folder) => inFolder(file, folder));
      const rank = parts.findIndex((part) => inFolder(file, part));
      return imports
        .filter((target) => {
          if (!inFolder(target, 'local')) return false;
          if (production) return true;
          return rank >= 0 && parts.findIndex((part) => inFolder(target, part)) > rank;
        })
        .map((target) => `${file} -> ${target}`);
    });
    expect(wrong).toEqual([]);
  });

  it('keeps bin/ on top: nothing but tests and benchmarks imports an entry point', () => {
    const upward = [...graph]
      .filter(([file]) => !inFolder(file, 'bin') && !inFolder(file, 'test') && !inFolder(file, 'bench'))
      .flatMap(([file, imports]) =>
        imports.filter((target) => inFolder(target, 'bin')).map((t) => `${file} -> ${t}`),
      );
    expect(upward).toEqual([]);
  });

  it('lets bench/ import from test/ only its shared support, which imports no suite-local module', () => {
    const support = path.join('test', 'support');
    const reaching = [...graph]
      .filter(([file]) => inFolder(file, 'bench') || inFolder(file, support))
      .flatMap(([file, imports]) =>
        imports
          .filter((target) => inFolder(target, 'test') && !inFolder(target, support))
          .map((target) => `${file} -> ${target}`),
      );
    expect(reaching).toEqual([]);
  });
});
