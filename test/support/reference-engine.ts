import { existsSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { EngineCommand } from '../../shared/backend/engine/engine-process.js';
import { serveEngine } from '../../shared/backend/engine/serve.js';
import { REFERENCE_TOKENIZER_DIR } from '../../shared/backend/reference/byte-tokenizer.js';
import { VOCAB } from '../../shared/backend/reference/model.js';
import { ReferenceBackend } from '../../shared/backend/reference/reference-backend.js';
import { DEFAULT_BASE_MODEL } from '../../shared/services/api/capabilities.js';

/**
 * The reference backend as an engine process (shared/backend/engine/serve.ts), for the protocol's and
 * the worker's tests. Faults on demand: when `REFERENCE_ENGINE_FAULTS` names a folder holding a file
 * named after the op about to run, the file is removed and the engine does what it says, once:
 * `exit` (crashes with code 3), `hang` (never answers, nor anything after) or `delay <ms>` (answers
 * that late). `REFERENCE_ENGINE_PROTOCOLS` lists the
 * protocol versions it speaks (default 1).
 */

const SELF = fileURLToPath(import.meta.url);

/** The command that starts this engine; `faults` is the folder of one-shot faults. */
export function referenceEngineCommand(
  options: { readonly faults?: string; readonly protocolVersions?: readonly number[] } = {},
): EngineCommand {
  return {
    command: process.execPath,
    args: ['--import', 'tsx', SELF],
    env: {
      ...(options.faults === undefined ? {} : { REFERENCE_ENGINE_FAULTS: options.faults }),
      ...(options.protocolVersions === undefined
        ? {}
        : { REFERENCE_ENGINE_PROTOCOLS: options.protocolVersions.join(',') }),
    },
    cwd: path.resolve(path.dirname(SELF), '../..'),
  };
}

async function faultBefore(op: string): Promise<void> {
  const folder = process.env.REFERENCE_ENGINE_FAULTS;
  if (folder === undefined) return;
  const file = path.join(folder, op);
  if (!existsSync(file)) return;
  const fault = readFileSync(file, 'utf8').trim();
  rmSync(file);
  process.stderr.write(`reference engine: injected ${fault} before ${op}\n`);
  if (fault === 'exit') process.exit(3);
  if (fault === 'hang') await new Promise(() => setInterval(() => undefined, 60_000));
  const delay = /^delay (\d+)$/.exec(fault);
  if (delay !== null) await new Promise((resolve) => setTimeout(resolve, Number(delay[1])));
}

if (process.argv[1] !== undefined && path.resolve(process.argv[1]) === SELF) {
  process.stderr.write('reference engine: ready\n');
  await serveEngine(new ReferenceBackend(), process.stdin, (chunk) => process.stdout.write(chunk), {
    engine: { name: 'reference', version: '1' },
    baseModels: [{ name: DEFAULT_BASE_MODEL, tokenizer_id: REFERENCE_TOKENIZER_DIR, vocab_size: VOCAB }],
    beforeRequest: faultBefore,
    ...(process.env.REFERENCE_ENGINE_PROTOCOLS === undefined
      ? {}
      : { protocolVersions: process.env.REFERENCE_ENGINE_PROTOCOLS.split(',').map(Number) }),
  });
  process.exit(0);
}
