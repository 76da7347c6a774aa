import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { App, type CfnElement } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { TinkerServerlessStack, type TinkerServerlessStackProps } from '../../../cdk/stack.js';
import type { FunctionId } from '../../../shared/base/topology.js';

const PROJECT_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

/** Stack name of the test stacks; it is also their name prefix. */
export const TEST_PREFIX = 'tinker-test';

/** The same feature flags `cdk synth` uses, so the tests see the template the CLI produces. */
function cdkJsonContext(): Record<string, unknown> {
  const cdkJson = JSON.parse(readFileSync(path.join(PROJECT_ROOT, 'cdk.json'), 'utf8')) as {
    context?: Record<string, unknown>;
  };
  return cdkJson.context ?? {};
}

export interface SynthOptions extends Omit<TinkerServerlessStackProps, 'stackName'> {
  /**
   * Bundle the functions with esbuild and run the built-in CloudFormation validation (slow: several
   * seconds). Off by default: `aws:cdk:bundling-stacks: []` skips asset bundling.
   */
  readonly full?: boolean;
}

export interface Synthesized {
  readonly app: App;
  readonly stack: TinkerServerlessStack;
  readonly template: Template;
  /** Cloud assembly directory of a `full` synth (assets, validation report); the caller removes it. */
  readonly outdir: string;
}

export function synth(options: SynthOptions = {}): Synthesized {
  const { full = false, ...props } = options;
  const outdir = mkdtempSync(path.join(tmpdir(), 'tinker-cdk-'));
  const app = new App({
    outdir,
    context: { ...cdkJsonContext(), ...(full ? {} : { 'aws:cdk:bundling-stacks': [] }) },
    builtinCloudFormationValidation: full,
  });
  try {
    const stack = new TinkerServerlessStack(app, 'TinkerTest', { ...props, stackName: TEST_PREFIX });
    return { app, stack, template: Template.fromStack(stack), outdir };
  } finally {
    if (!full) rmSync(outdir, { recursive: true, force: true });
  }
}

type Resource = { Type: string; Properties?: Record<string, unknown> };

/** Logical id of the single resource of `type` whose properties include `name` under `key`. */
export function logicalIdWhere(template: Template, type: string, key: string, name: unknown): string {
  const matches = Object.entries(template.findResources(type) as Record<string, Resource>).filter(
    ([, resource]) => JSON.stringify(resource.Properties?.[key]) === JSON.stringify(name),
  );
  if (matches.length !== 1) throw new Error(`Expected one ${type} with ${key}=${JSON.stringify(name)}`);
  return matches[0]![0];
}

/** Logical id of the Lambda function the stack built for a topology function. */
export function functionLogicalId(stack: TinkerServerlessStack, functionId: FunctionId): string {
  const fn = stack.functions[functionId];
  if (!fn) throw new Error(`The stack has no ${functionId} function`);
  return stack.getLogicalId(fn.node.defaultChild as CfnElement);
}

export function properties(template: Template, logicalId: string): Record<string, unknown> {
  const resource = (template.toJSON().Resources as Record<string, Resource>)[logicalId];
  if (!resource) throw new Error(`No resource ${logicalId}`);
  return resource.Properties ?? {};
}
