import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';

/**
 * fauxqs exports only `buildApp`; its classes sit beside it in the package (the types name its
 * stores through `BuildAppOptions['stores']`). Loads one by file, next to the module the package
 * exports, and fails with the file's name when a new fauxqs moved it. The package is found on the
 * resolver's search path (its `exports` answer only `import`, and vitest's global setup, which
 * starts the local cloud, has no `import.meta.resolve`).
 */
export async function fauxqsClass<T>(file: string, name: string): Promise<T> {
  const module = (await import(pathToFileURL(join(fauxqsDist(), file)).href)) as Record<string, unknown>;
  const value = module[name];
  if (typeof value !== 'function') throw new Error(`fauxqs no longer exports ${name} from ${file}`);
  return value as T;
}

function fauxqsDist(): string {
  for (const directory of createRequire(import.meta.url).resolve.paths('fauxqs') ?? []) {
    const entry = join(directory, 'fauxqs', 'dist', 'app.js');
    if (existsSync(entry)) return dirname(entry);
  }
  throw new Error('fauxqs is not installed (npm ci)');
}
