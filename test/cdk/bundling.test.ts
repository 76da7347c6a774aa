import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FUNCTION_IDS, topology } from '../../shared/base/topology.js';
import { functionLogicalId, type Synthesized, synth } from '../support/cdk/synth.js';

// The one test that really bundles (local esbuild, no Docker) and runs CloudFormation validation;
// every other CDK test skips bundling for speed.
describe('full synth', () => {
  let synthesized: Synthesized;

  // Generous: four esbuild runs plus validation take ~20 s idle on two cores, minutes when busy.
  beforeAll(() => {
    synthesized = synth({ full: true });
  }, 300_000);
  afterAll(() => {
    // Unset when the synth itself failed.
    if (synthesized) rmSync(synthesized.outdir, { recursive: true, force: true });
  });

  /** The staged asset of a function: its directory is named by the hash its S3 key carries. */
  function assetDir(functionId: (typeof FUNCTION_IDS)[number]): string {
    const { stack, template, outdir } = synthesized;
    const resources = template.toJSON().Resources as Record<
      string,
      { Properties: { Code: { S3Key: string } } }
    >;
    const code = resources[functionLogicalId(stack, functionId)]!.Properties.Code;
    return path.join(outdir, `asset.${code.S3Key.replace(/\.zip$/, '')}`);
  }

  it('bundles every handler into an ESM file with a source map', () => {
    for (const functionId of FUNCTION_IDS) {
      const dir = assetDir(functionId);
      expect(existsSync(path.join(dir, 'index.mjs.map')), `${functionId} source map`).toBe(true);
      const code = readFileSync(path.join(dir, 'index.mjs'), 'utf8');
      expect(code).toContain('createRequire(import.meta.url)');
      // Bundled, not left to the runtime: no bare import of the SDK or of project modules survives.
      expect(code).not.toMatch(/from\s*["']@aws-sdk\//);
      expect(code).not.toMatch(/from\s*["']\.\.?\//);
    }
  });

  it('produces bundles that Node loads and that export the handler', () => {
    // Lambda's environment, with placeholder resource names: handlers may read config at import.
    const env = {
      ...process.env,
      ...topology.settings,
      FUTURES_TABLE: 'f',
      MODELS_TABLE: 'm',
      REGISTRY_TABLE: 'r',
      PREFIXES_TABLE: 'p',
      DATA_BUCKET: 'b',
      WORK_QUEUE_URL: 'http://localhost:1/q',
      AWS_REGION: 'us-east-1',
    };
    for (const functionId of FUNCTION_IDS) {
      const url = pathToFileURL(path.join(assetDir(functionId), 'index.mjs')).href;
      const script = `const m = await import(${JSON.stringify(url)}); process.stdout.write(typeof m.handler);`;
      const output = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
        env,
        encoding: 'utf8',
      });
      expect(output, functionId).toBe('function');
    }
  }, 120_000);

  it('ships the status page beside the api bundle, which serves it and guards its data', () => {
    const dir = assetDir('api');
    for (const name of ['status.html', 'status.js', 'status.css']) {
      expect(existsSync(path.join(dir, 'assets', name)), name).toBe(true);
    }
    // The bundled handler, as API Gateway calls it: the page and its script answer without a key or
    // any AWS call, and the data refuses a request without a key before reading anything.
    const url = pathToFileURL(path.join(dir, 'index.mjs')).href;
    const script = `
      const { handler } = await import(${JSON.stringify(url)});
      const call = (rawPath) => handler({ rawPath, headers: {}, requestContext: { http: { method: 'GET' } } });
      const answers = await Promise.all(['/status', '/status/app.js', '/status/data'].map(call));
      process.stdout.write(JSON.stringify(answers.map((a) => [a.statusCode, a.headers['content-type'], a.body.slice(0, 80)])));`;
    const output = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
      env: {
        ...process.env,
        ...topology.settings,
        REGISTRY_TABLE: 'r',
        AWS_REGION: 'us-east-1',
        POWERTOOLS_LOG_LEVEL: 'ERROR',
      },
      encoding: 'utf8',
    });
    const [page, js, data] = JSON.parse(output) as [number, string, string][];
    expect(page).toEqual([200, 'text/html; charset=utf-8', expect.stringContaining('<!doctype html>')]);
    expect(js).toEqual([200, 'text/javascript; charset=utf-8', expect.any(String)]);
    expect(data).toEqual([401, 'application/json', expect.stringContaining('missing X-API-Key header')]);
  }, 60_000);

  it('passes the CDK built-in CloudFormation validation with no error', () => {
    const reportFile = path.join(synthesized.outdir, 'validation-report.json');
    expect(existsSync(reportFile), 'validation ran').toBe(true);
    const report = JSON.parse(readFileSync(reportFile, 'utf8')) as {
      pluginReports: { violations?: { ruleName: string; severity?: string }[] }[];
    };
    const errors = report.pluginReports
      .flatMap((plugin) => plugin.violations ?? [])
      .filter((violation) => violation.severity === 'error' || violation.severity === 'fatal');
    expect(errors).toEqual([]);
  });
});
