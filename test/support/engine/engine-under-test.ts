import { existsSync } from 'node:fs';
import type { EngineCommand } from '../../../shared/backend/engine/engine-process.js';
import {
  TINY_MODEL_DIR,
  TORCH_ENGINE_VENV,
  torchEngineCommand,
} from '../../../shared/backend/engine/installed-engines.js';
import { missingPrerequisite } from '../prerequisites.js';

/**
 * The engine the engine tests drive: ENGINE_COMMAND (a JSON list, the command and its arguments, for
 * any engine), else the torch engine of `.local/engine-venv` on the tiny model. Without either it
 * says in one line why the engine tests skip (no `command`), or throws under CI, which installs the
 * engine (test/support/prerequisites.ts).
 */
export function engineUnderTest(): {
  readonly command?: EngineCommand;
  readonly baseModel?: string;
} {
  const raw = process.env.ENGINE_COMMAND;
  if (raw !== undefined && raw !== '') {
    const parsed = JSON.parse(raw) as unknown;
    if (!Array.isArray(parsed) || parsed.length === 0 || !parsed.every((part) => typeof part === 'string')) {
      throw new Error('ENGINE_COMMAND must be a JSON list of strings: the command, then its arguments');
    }
    const [command, ...args] = parsed as string[];
    return { command: { command: command as string, args } };
  }
  if (!existsSync(`${TORCH_ENGINE_VENV}/bin/python`) || !existsSync(`${TINY_MODEL_DIR}/config.json`)) {
    missingPrerequisite('the torch engine is not installed (npm run engine:install); engine tests skipped');
    return {};
  }
  return {
    command: torchEngineCommand({ baseModel: TINY_MODEL_DIR, device: 'cpu', dtype: 'float32' }),
    baseModel: TINY_MODEL_DIR,
  };
}
