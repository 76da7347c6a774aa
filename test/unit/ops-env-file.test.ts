import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { resolveCliEnvironment } from '../../bin/cli.js';
import {
  parseEnvFile,
  readEnvFile,
  removeLocalEnvFile,
  resolveEnvironment,
  WORKER_ENV_OUTPUTS,
  WRITER_PID_VARIABLE,
  writeLocalEnvFile,
} from '../../shared/base/env-file.js';

const dir = mkdtempSync(path.join(tmpdir(), 'tinker-env-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('env files for the operator CLI', () => {
  it('reads a flat JSON map, NAME=value lines, and CDK outputs with an OperatorEnv or WorkerEnv output', () => {
    expect(parseEnvFile('{"POOL":"gpu","LIVE_SHARDS":"4"}')).toEqual({ POOL: 'gpu', LIVE_SHARDS: '4' });
    expect(parseEnvFile('# comment\nexport POOL="gpu"\n\nREGISTRY_TABLE=t-registry\n')).toEqual({
      POOL: 'gpu',
      REGISTRY_TABLE: 't-registry',
    });
    const outputs = {
      'tinker-serverless': {
        ApiUrl: 'https://x.execute-api',
        WorkerEnv: JSON.stringify({ POOL: 'default', REGISTRY_TABLE: 'p-registry' }),
      },
    };
    // A stack deployed before OperatorEnv existed.
    expect(parseEnvFile(JSON.stringify(outputs))).toEqual({ POOL: 'default', REGISTRY_TABLE: 'p-registry' });
    const withOperator = {
      'tinker-serverless': {
        ...outputs['tinker-serverless'],
        OperatorEnv: JSON.stringify({ POOL: 'default', WORK_DLQ_URL: 'https://sqs/p-work-dlq' }),
      },
    };
    expect(parseEnvFile(JSON.stringify(withOperator))).toEqual({
      POOL: 'default',
      WORK_DLQ_URL: 'https://sqs/p-work-dlq',
    });
  });

  it('names what is wrong with a file it cannot use', () => {
    expect(() => parseEnvFile('POOL gpu', 'x.env')).toThrow('x.env:1: expected NAME=value');
    expect(() => parseEnvFile('{"stack":{"ApiUrl":"u"}}', 'out.json')).toThrow(/OperatorEnv or WorkerEnv/);
  });

  it('is written privately with its writer pid, and removed only by its writer', () => {
    const file = path.join(dir, 'env.json');
    writeLocalEnvFile({ POOL: 'default' }, file);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const written = parseEnvFile(readFileSync(file, 'utf8'));
    expect(written).toEqual({ POOL: 'default', [WRITER_PID_VARIABLE]: String(process.pid) });
    writeLocalEnvFile({ POOL: 'other', [WRITER_PID_VARIABLE]: '1' }, file, false);
    removeLocalEnvFile(file);
    expect(parseEnvFile(readFileSync(file, 'utf8')).POOL).toBe('other');
    writeLocalEnvFile({ POOL: 'default' }, file);
    removeLocalEnvFile(file);
    expect(() => statSync(file)).toThrow();
  });

  it('picks --env-file, else a configured environment, else a live npm start, and says what to do otherwise', () => {
    const file = path.join(dir, 'picked.json');
    writeLocalEnvFile({ POOL: 'from-file' }, file, false);
    expect(resolveCliEnvironment(file, {}, path.join(dir, 'absent.json')).variables.POOL).toBe('from-file');
    expect(resolveCliEnvironment(undefined, { REGISTRY_TABLE: 'r' }, file)).toEqual({
      source: 'environment',
      variables: {},
      localStack: false,
    });
    const live = path.join(dir, 'live.json');
    writeLocalEnvFile({ POOL: 'local' }, live);
    expect(resolveCliEnvironment(undefined, {}, live)).toMatchObject({
      variables: { POOL: 'local' },
      localStack: true,
    });
    // A pid that cannot be alive: the file is stale.
    writeLocalEnvFile({ POOL: 'local', [WRITER_PID_VARIABLE]: '2147483646' }, live, false);
    expect(() => resolveCliEnvironment(undefined, {}, live)).toThrow(/no longer running \(pid 2147483646\)/);
    expect(() => resolveCliEnvironment(undefined, {}, path.join(dir, 'absent.json'))).toThrow(
      /run 'npm start'/,
    );
  });

  it('gives npm run worker WorkerEnv first, and says which variable it looks for', () => {
    const outputs = path.join(dir, 'outputs.json');
    writeFileSync(
      outputs,
      JSON.stringify({
        stack: {
          OperatorEnv: JSON.stringify({ WORK_QUEUE_URL: 'q', WORK_DLQ_URL: 'dlq' }),
          WorkerEnv: JSON.stringify({ WORK_QUEUE_URL: 'q' }),
        },
      }),
    );
    const resolve = (envFile: string | undefined, env: Record<string, string>, localEnvFile: string) =>
      resolveEnvironment({
        envFile,
        env,
        localEnvFile,
        readyVariable: 'WORK_QUEUE_URL',
        needs: 'WORK_QUEUE_URL and the rest of WorkerEnv',
        outputs: WORKER_ENV_OUTPUTS,
      });
    const absent = path.join(dir, 'absent.json');
    expect(resolve(outputs, {}, absent)).toEqual({
      source: outputs,
      variables: { WORK_QUEUE_URL: 'q' },
      localStack: false,
    });
    expect(readEnvFile(outputs).WORK_DLQ_URL).toBe('dlq');
    expect(resolve(undefined, { WORK_QUEUE_URL: 'q' }, absent).source).toBe('environment');
    expect(() => resolve(undefined, {}, absent)).toThrow(
      /pass --env-file FILE, or set WORK_QUEUE_URL and the rest of WorkerEnv/,
    );
  });
});
