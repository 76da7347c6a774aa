import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { App, RemovalPolicy, Validations } from 'aws-cdk-lib';
import type { IConstruct } from 'constructs';
import { describe, expect, it, vi } from 'vitest';
import { acknowledgeNagFindings, addNagChecks, nagAcknowledgments, nagFindings } from '../../cdk/nag.js';
import { TinkerServerlessStack } from '../../cdk/stack.js';
import { GPU_WORKERS_DEFAULTS } from '../../shared/base/config.js';
import { FUNCTION_IDS } from '../../shared/base/topology.js';
import { functionLogicalId, properties, type SynthOptions, synth } from '../support/cdk/synth.js';

/**
 * cdk-nag's AwsSolutions checks: no finding is left unacknowledged, every acknowledgment has a
 * written reason and is needed (it matches a finding the checks really make), and `cdk synth` runs the
 * checks and stops on a finding. Plus the fixes that made the stack pass: one role per function with
 * no AWS managed policy, and access logs on the API stage that hold no headers or bodies.
 */

const VARIANTS: [string, SynthOptions][] = [
  ['default', {}],
  ['destroyable', { removalPolicy: RemovalPolicy.DESTROY }],
  ['without the reference worker', { referenceWorker: false }],
  ['without tracing', { tracing: false }],
  [
    'with the GPU worker fleet',
    {
      referenceWorker: false,
      baseModels: '[{"name":"Qwen/Qwen3-0.6B"}]',
      gpuWorkers: { ...GPU_WORKERS_DEFAULTS, spot: true },
    },
  ],
];

/** Every acknowledgment recorded anywhere in the tree: rule id and reason. */
function recordedAcknowledgments(root: IConstruct): { id: string; reason: unknown; path: string }[] {
  return root.node.findAll().flatMap((construct) =>
    construct.node.metadata
      .filter((entry) => entry.type === Validations.ACKNOWLEDGED_RULES_METADATA_KEY)
      .flatMap((entry) =>
        Object.entries(entry.data as Record<string, unknown>).map(([id, reason]) => ({
          id: id.replace(/^annotation::/i, ''),
          reason,
          path: construct.node.path,
        })),
      ),
  );
}

describe('AwsSolutions checks', () => {
  it.each(VARIANTS)('leave no unacknowledged finding (%s stack)', (_, options) => {
    const { stack } = synth(options);
    acknowledgeNagFindings(stack);
    const findings = nagFindings(stack).map(
      (finding) =>
        `${finding.severity} ${finding.ruleName} on ${finding.violatingResources.map((r) => r.constructPath).join(', ')}`,
    );
    expect(findings).toEqual([]);
  });

  it.each(VARIANTS)(
    'acknowledge exactly the findings the checks make, no stale ones (%s stack)',
    (_, options) => {
      const { stack } = synth(options);
      const raised = new Set(nagFindings(stack).map((finding) => finding.ruleName));
      const acknowledged = new Set(nagAcknowledgments(stack).map((entry) => entry.id));
      expect([...acknowledged].sort()).toEqual([...raised].sort());
      // The checks run and bite: without acknowledgments these are errors.
      expect(raised).toContain('AwsSolutions-APIG4');
    },
  );

  it('record a written reason with every acknowledgment', () => {
    const { stack } = synth();
    acknowledgeNagFindings(stack);
    const recorded = recordedAcknowledgments(stack);
    expect(recorded.length).toBe(nagAcknowledgments(stack).length);
    for (const { id, reason, path: where } of recorded) {
      expect(id, where).toMatch(/^AwsSolutions-/);
      expect(typeof reason, `${id} on ${where}`).toBe('string');
      // A reason, not a placeholder: several words saying why.
      expect((reason as string).split(/\s+/).length, `${id} on ${where}`).toBeGreaterThanOrEqual(15);
    }
  });

  it('acknowledge on the narrowest construct: the runtime per function, ListStreams on stream-triggered roles, X-Ray on traced ones', () => {
    const { stack } = synth();
    const byId = new Map<string, string[]>();
    for (const { id, scope } of nagAcknowledgments(stack))
      byId.set(id, [...(byId.get(id) ?? []), scope.node.path]);
    expect(byId.get('AwsSolutions-L1')?.sort()).toEqual(
      FUNCTION_IDS.map((functionId) => stack.functions[functionId]!.node.path).sort(),
    );
    // Traced (the default): every role may send traces; the scheduler's acknowledgment names ListStreams too.
    const wildcards = nagAcknowledgments(stack).filter(({ id }) => id === 'AwsSolutions-IAM5[Resource::*]');
    expect(wildcards.map(({ scope }) => scope.node.path).sort()).toEqual(
      FUNCTION_IDS.map((functionId) => stack.functions[functionId]!.role!.node.path).sort(),
    );
    for (const { scope, reason } of wildcards) {
      expect(reason).toContain('xray:PutTraceSegments');
      expect(reason.includes('ListStreams')).toBe(scope === stack.functions.scheduler!.role);
    }
    const untraced = synth({ tracing: false }).stack;
    expect(
      nagAcknowledgments(untraced)
        .filter(({ id }) => id === 'AwsSolutions-IAM5[Resource::*]')
        .map(({ scope }) => scope.node.path),
    ).toEqual([untraced.functions.scheduler!.role!.node.path]);
    expect(byId.get('AwsSolutions-APIG4')).toEqual([stack.http!.node.path]);
    // Only the stream failure queue goes without a DLQ of its own; the work queue has one.
    expect(byId.get('AwsSolutions-SQS3')).toEqual([stack.queues.byId.streamDlq.node.path]);
  });

  it('run when the app synthesizes, and stop it on an unacknowledged finding', () => {
    const synthesize = (acknowledge: boolean) => {
      const outdir = mkdtempSync(path.join(tmpdir(), 'tinker-nag-'));
      try {
        const app = new App({ outdir, context: { 'aws:cdk:bundling-stacks': [] } });
        const stack = new TinkerServerlessStack(app, 'NagTest', { stackName: 'tinker-nag' });
        addNagChecks(app, acknowledge ? [stack] : []);
        app.synth();
      } finally {
        rmSync(outdir, { recursive: true, force: true });
      }
    };
    expect(() => synthesize(true)).not.toThrow();
    // The failing synthesis prints its whole report; keep it out of the test output.
    const quiet = [
      vi.spyOn(console, 'error').mockImplementation(() => {}),
      vi.spyOn(console, 'log').mockImplementation(() => {}),
      vi.spyOn(process.stderr, 'write').mockImplementation(() => true),
    ];
    try {
      expect(() => synthesize(false)).toThrow(/Validation failed|\(AwsSolutions\)/);
    } finally {
      for (const spy of quiet) spy.mockRestore();
    }
  });
});

describe('the fixes behind a clean report', () => {
  const { stack, template } = synth();

  it('gives every function its own role with no AWS managed policy, writing only to its own log group', () => {
    for (const functionId of FUNCTION_IDS) {
      const fn = properties(template, functionLogicalId(stack, functionId));
      const roleId = (fn.Role as { 'Fn::GetAtt': [string] })['Fn::GetAtt'][0];
      expect(properties(template, roleId).ManagedPolicyArns, functionId).toBeUndefined();
      const logGroupId = (fn.LoggingConfig as { LogGroup: { Ref: string } }).LogGroup.Ref;
      const logStatements = Object.values(template.findResources('AWS::IAM::Policy'))
        .map(
          (policy) =>
            policy.Properties as { Roles: { Ref: string }[]; PolicyDocument: { Statement: unknown[] } },
        )
        .filter((policy) => policy.Roles.some((role) => role.Ref === roleId))
        .flatMap(
          (policy) => policy.PolicyDocument.Statement as { Action: string | string[]; Resource: unknown }[],
        )
        .filter((statement) =>
          ([] as string[]).concat(statement.Action).some((action) => action.startsWith('logs:')),
        );
      expect(logStatements, functionId).toEqual([
        {
          Effect: 'Allow',
          Action: ['logs:CreateLogStream', 'logs:PutLogEvents'],
          Resource: { 'Fn::GetAtt': [logGroupId, 'Arn'] },
        },
      ]);
    }
    // No other role in the stack uses AWSLambdaBasicExecutionRole either.
    expect(JSON.stringify(template.toJSON())).not.toContain('AWSLambdaBasicExecutionRole');
  });

  it('logs API requests to a bounded log group, without headers, query strings or bodies', () => {
    const stages = Object.values(template.findResources('AWS::ApiGatewayV2::Stage'));
    expect(stages).toHaveLength(1);
    const stage = stages[0]!.Properties as {
      StageName: string;
      AutoDeploy: boolean;
      AccessLogSettings: { DestinationArn: { 'Fn::GetAtt': [string, string] }; Format: string };
    };
    expect(stage).toMatchObject({ StageName: '$default', AutoDeploy: true });
    const [logGroupId] = stage.AccessLogSettings.DestinationArn['Fn::GetAtt'];
    expect(properties(template, logGroupId).RetentionInDays).toBe(30);
    const format = JSON.parse(stage.AccessLogSettings.Format) as Record<string, string>;
    expect(format.requestId).toBe('$context.requestId');
    for (const variable of Object.values(format)) {
      expect(variable).toMatch(/^\$context\.[A-Za-z.]+$/);
      expect(variable).not.toMatch(/header|querystring|body|authorizer|apiKey/i);
    }
  });
});
