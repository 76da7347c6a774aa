import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PROJECT_ROOT } from '../../shared/base/env-file.js';

/**
 * The production entry points (`npm run build`: bin/worker.ts and bin/cli.ts compiled to JavaScript)
 * run with the `dependencies` of package.json alone, so a GPU host can `npm ci --omit=dev` and start
 * `node dist/bin/worker.js`. The build is emitted into a folder under `.local/` (inside the checkout,
 * so the emitted files resolve the checkout's node_modules), and every module it can load is checked.
 */

const ENTRY_POINTS = ['bin/worker.js', 'bin/cli.js'];

let outDir: string;

beforeAll(() => {
  const parent = path.join(PROJECT_ROOT, '.local');
  mkdirSync(parent, { recursive: true });
  outDir = mkdtempSync(path.join(parent, 'build-test-'));
  execFileSync(
    process.execPath,
    [
      path.join(PROJECT_ROOT, 'node_modules/typescript/bin/tsc'),
      '-p',
      'tsconfig.build.json',
      '--outDir',
      outDir,
    ],
    { cwd: PROJECT_ROOT, stdio: 'pipe' },
  );
}, 120_000);

afterAll(() => {
  if (outDir !== undefined) rmSync(outDir, { recursive: true, force: true });
});

/** The specifiers of a module's static imports and re-exports, and of `import('literal')`. */
function importsOf(source: string): string[] {
  const specifiers: string[] = [];
  const patterns = [
    /^\s*(?:import|export)\s[^'"]*?from\s*['"]([^'"]+)['"]/gm,
    /^\s*import\s*['"]([^'"]+)['"]/gm,
    /\bimport\(\s*['"]([^'"]+)['"]\s*\)/g,
  ];
  for (const pattern of patterns) {
    for (const match of source.matchAll(pattern)) specifiers.push(match[1] as string);
  }
  return specifiers;
}

function packageNameOf(specifier: string): string {
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? `${parts[0]}/${parts[1]}` : (parts[0] as string);
}

/** Every bare package the entry points can load, walking relative imports through the emitted files. */
function packagesReached(): Map<string, string> {
  const reached = new Map<string, string>();
  const pending = ENTRY_POINTS.map((entry) => path.join(outDir, entry));
  const seen = new Set<string>();
  while (pending.length > 0) {
    const file = pending.pop() as string;
    if (seen.has(file)) continue;
    seen.add(file);
    expect(existsSync(file), `${path.relative(outDir, file)} is emitted`).toBe(true);
    for (const specifier of importsOf(readFileSync(file, 'utf8'))) {
      if (specifier.startsWith('.')) pending.push(path.resolve(path.dirname(file), specifier));
      else if (!specifier.startsWith('node:') && !builtinModules.includes(specifier)) {
        reached.set(packageNameOf(specifier), path.relative(outDir, file));
      }
    }
  }
  return reached;
}

describe('production build', () => {
  it('needs no devDependency at run time', () => {
    const manifest = JSON.parse(readFileSync(path.join(PROJECT_ROOT, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    };
    const reached = packagesReached();
    expect(reached.has('@aws-sdk/client-sqs')).toBe(true);
    const missing = [...reached].filter(([name]) => manifest.dependencies[name] === undefined);
    expect(missing, 'packages the compiled entry points import that are not dependencies').toEqual([]);
  });

  it('runs the compiled CLI with plain node (no TypeScript loader)', () => {
    const run = spawnSync(process.execPath, [path.join(outDir, 'bin/cli.js'), '--help'], {
      cwd: PROJECT_ROOT,
      encoding: 'utf8',
      env: { PATH: process.env.PATH ?? '', AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
    });
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toContain('usage: npx tinker-serverless');
  });

  it('starts the compiled worker as far as reading its environment', () => {
    const envFile = path.join(outDir, 'empty-env.json');
    writeFileSync(envFile, '{}');
    const run = spawnSync(process.execPath, [path.join(outDir, 'bin/worker.js'), '--env-file', envFile], {
      cwd: PROJECT_ROOT,
      encoding: 'utf8',
      env: { PATH: process.env.PATH ?? '', AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
    });
    // Every module loaded; the empty environment is what stops it.
    expect(run.stderr).toContain('Missing required environment variable');
    expect(run.stderr).not.toMatch(/ERR_MODULE_NOT_FOUND|Cannot find/);
  });

  it('finds the engine environment and the tiny model under the checkout, not under the build folder', () => {
    const engines = path.join(outDir, 'shared/backend/engine/installed-engines.js');
    const run = spawnSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        `const m = await import(${JSON.stringify(pathToFileURL(engines).href)}); console.log(JSON.stringify([m.TORCH_ENGINE_VENV, m.TINY_MODEL_DIR]));`,
      ],
      { cwd: outDir, encoding: 'utf8', env: { PATH: process.env.PATH ?? '' } },
    );
    expect(run.status, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual([
      path.join(PROJECT_ROOT, '.local', 'engine-venv'),
      path.join(PROJECT_ROOT, '.local', 'models', 'tiny-llama'),
    ]);
  });
});
