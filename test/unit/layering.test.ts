import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * The layer rule of `shared/`, checked on the import statements of every file so it cannot regress.
 * The folders of `shared/` are its layers, bottom up: `base/`, the floor `aws/` beside the pure
 * `domain/`, `backend/` and `wire/`, then `repositories/`, `services/` and `client/`. A unit is the
 * longest entry of the table below that holds a file (a file of `base/`, a folder such as
 * `domain/planning` or `services/worker`, else its layer). A unit may import itself and any unit of a
 * lower rank, never one of its own rank or above. The order is what the code is:
 * - 0-2 `base/`: errors, logging, ids and key shapes, then the topology (which names registry keys
 *   in its stream filters), then config read from it (and the env files operator tools read);
 * - 3-4 the floor (`aws/`: clients and generic AWS helpers) beside the pure layers (`domain/`
 *   records and rules, `backend/`, then `domain/planning/` the scheduling policy, `wire/` codecs and
 *   the checkpoint archive on top of them);
 * - 5-6 `repositories/`: S3 payloads and the prefix store, then one module per record;
 * - 7-9 `services/`: ops (controls, metrics and the status read, built on repositories), then the
 *   scheduler, worker and the status page, then the sweeper (whose round runs the scheduler's safety
 *   tick) and the API;
 * - 10 `client/`, the TypeScript client built on the API's schemas.
 */
const RANKS: Readonly<Record<string, number>> = {
  'base/errors.ts': 0,
  'base/logger.ts': 0,
  'base/ids.ts': 0,
  'base/storage-keys.ts': 0,
  'base/registry-keys.ts': 0,
  'base/payload-bytes.ts': 0,
  'base/fault-hook.ts': 0,
  'base/commit-signal.ts': 0,
  'base/stack-outputs.ts': 0,
  'base/topology.ts': 1,
  'base/config.ts': 2,
  'base/grants.ts': 2,
  'base/env-file.ts': 2,
  aws: 3,
  domain: 3,
  backend: 3,
  'domain/planning': 4,
  wire: 4,
  'wire/archive': 4,
  'repositories/payloads.ts': 5,
  'repositories/prefix': 5,
  repositories: 6,
  'services/ops': 7,
  'services/scheduler': 8,
  'services/worker': 8,
  'services/status-page': 8,
  'services/sweeper': 9,
  'services/api': 9,
  client: 10,
};

/** The floor imports, of the rest of `shared/`, only these (and itself). */
const FLOOR_MAY_IMPORT = new Set(['aws', 'base/errors.ts', 'base/config.ts', 'base/logger.ts']);
/** Pure layers: no AWS SDK and no adapter, so they are tested without a cloud. */
const PURE = new Set(['domain', 'domain/planning', 'backend', 'wire', 'wire/archive']);
/** Folders above `shared/` that nothing in it may import. */
const OUTSIDE = ['functions', 'local', 'bench', 'test', 'cdk'];

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const SHARED = path.join(ROOT, 'shared');

/** Every module specifier of a file: static and type imports, re-exports, side-effect and dynamic imports. */
function importSpecifiers(source: string): string[] {
  const patterns = [
    /(?:^|[\n;])\s*(?:import|export)\s[^;'"]*?\sfrom\s*['"]([^'"]+)['"]/g,
    /(?:^|[\n;])\s*import\s*['"]([^'"]+)['"]/g,
    /\bimport\s*\(\s*['"]([^'"]+)['"]\s*\)/g,
  ];
  return patterns.flatMap((pattern) => [...source.matchAll(pattern)].map((match) => match[1] ?? ''));
}

/** The unit of a path relative to the repository root (`shared/services/worker/x.ts` -> `services/worker`), or the top folder outside shared. */
function unitOf(relative: string): { readonly inShared: boolean; readonly unit: string } {
  const parts = relative.split('/');
  if (parts[0] !== 'shared') return { inShared: false, unit: parts[0] ?? relative };
  const inside = parts.slice(1);
  for (let length = inside.length; length > 0; length--) {
    const candidate = inside.slice(0, length).join('/');
    if (candidate in RANKS) return { inShared: true, unit: candidate };
  }
  return { inShared: true, unit: inside[0] ?? relative };
}

/** Why `from` (a shared file) may not import `to` (a module specifier resolved against it), or undefined. */
function violation(from: string, specifier: string): string | undefined {
  const source = unitOf(from).unit;
  if (specifier.startsWith('@aws-sdk/') && PURE.has(source)) return `pure ${source}/ imports the AWS SDK`;
  if (!specifier.startsWith('.')) return undefined;
  const resolved = path.posix
    .normalize(path.posix.join(path.posix.dirname(from), specifier))
    .replace(/\.js$/, '.ts');
  const target = unitOf(resolved);
  if (!target.inShared) {
    return OUTSIDE.includes(target.unit) ? `shared/ imports ${target.unit}/` : undefined;
  }
  if (target.unit === source) return undefined;
  const sourceRank = RANKS[source];
  const targetRank = RANKS[target.unit];
  if (sourceRank === undefined) return `${source} has no rank in the layer table`;
  if (targetRank === undefined) return `${target.unit} has no rank in the layer table`;
  if (source === 'aws' && !FLOOR_MAY_IMPORT.has(target.unit)) return `the floor imports ${target.unit}`;
  if (PURE.has(source) && target.unit === 'aws') return `pure ${source}/ imports the AWS floor`;
  if (targetRank >= sourceRank)
    return `${source} (rank ${sourceRank}) imports ${target.unit} (rank ${targetRank})`;
  return undefined;
}

function sharedFiles(dir: string = SHARED): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return sharedFiles(full);
    return entry.name.endsWith('.ts') ? [path.relative(ROOT, full).split(path.sep).join('/')] : [];
  });
}

describe('the layers of shared/', () => {
  const files = sharedFiles();

  it('gives every folder and root file of shared/ a rank', () => {
    const unranked = [...new Set(files.map((file) => unitOf(file).unit))].filter((unit) => !(unit in RANKS));
    expect(unranked).toEqual([]);
  });

  it('has no import that runs up, sideways or out of shared/', () => {
    let imports = 0;
    const found: string[] = [];
    for (const file of files) {
      for (const specifier of importSpecifiers(readFileSync(path.join(ROOT, file), 'utf8'))) {
        imports++;
        const why = violation(file, specifier);
        if (why !== undefined) found.push(`${file} -> ${specifier}: ${why}`);
      }
    }
    expect(found).toEqual([]);
    // The parser sees the imports it checks (a regression of the patterns would pass vacuously).
    expect(imports).toBeGreaterThan(files.length * 2);
  });

  it('rejects each kind of wrong arrow', () => {
    expect(violation('shared/services/ops/status-reader.ts', '../scheduler/tick.js')).toMatch(
      /rank 7.*rank 8/,
    );
    expect(violation('shared/services/worker/lease.ts', '../scheduler/tick.js')).toMatch(/rank 8.*rank 8/);
    expect(violation('shared/aws/batch-get.ts', '../repositories/prefix/limiter.js')).toMatch(
      /floor imports repositories\/prefix/,
    );
    expect(violation('shared/aws/clients.ts', '../base/ids.js')).toMatch(/floor imports base\/ids/);
    expect(violation('shared/domain/records.ts', '../repositories/prefix/types.js')).toMatch(
      /rank 3.*rank 5/,
    );
    expect(violation('shared/domain/records.ts', './planning/planner.js')).toMatch(/rank 3.*rank 4/);
    expect(violation('shared/domain/planning/planner.ts', '../../aws/limiter.js')).toMatch(
      /pure domain\/planning/,
    );
    expect(violation('shared/wire/results.ts', '@aws-sdk/client-s3')).toMatch(/AWS SDK/);
    expect(violation('shared/wire/archive/tar.ts', '../results.js')).toMatch(/rank 4.*rank 4/);
    expect(violation('shared/base/topology.ts', './config.js')).toMatch(/rank 1.*rank 2/);
    expect(violation('shared/base/config.ts', '../../local/cloud/resources.js')).toMatch(/imports local/);
    expect(violation('shared/services/worker/runtime.ts', '../../../functions/worker/handler.js')).toMatch(
      /imports functions/,
    );
    expect(violation('shared/newfolder/x.ts', '../base/errors.js')).toMatch(/no rank/);
    expect(violation('shared/services/sweeper/sweep.ts', '../scheduler/tick.js')).toBeUndefined();
    expect(violation('shared/repositories/checkpoints/gc.ts', '../models.js')).toBeUndefined();
    expect(violation('shared/aws/transact.ts', '../base/errors.js')).toBeUndefined();
  });

  it('finds every form of import', () => {
    const source = [
      "import { a } from './a.js';",
      "import type { B } from '../b.js';",
      'import {\n  c,\n  type D,\n} from "./c.js";',
      "export { e } from './e.js';",
      "export type * from './f.js';",
      "import './g.js';",
      "const h = await import('./h.js');",
      "const text = 'not an import from here';",
    ].join('\n');
    expect(importSpecifiers(source).sort()).toEqual(
      ['./a.js', '../b.js', './c.js', './e.js', './f.js', './g.js', './h.js'].sort(),
    );
  });
});
