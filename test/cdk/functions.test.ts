import { describe, expect, it } from 'vitest';
import { grantedEnvVars } from '../../shared/base/grants.js';
import {
  FUNCTION_IDS,
  type FunctionId,
  physicalName,
  type QueueId,
  topology,
} from '../../shared/base/topology.js';
import { functionLogicalId, logicalIdWhere, properties, synth, TEST_PREFIX } from '../support/cdk/synth.js';

const { stack, template } = synth();

function functionProps(functionId: FunctionId): Record<string, unknown> {
  return properties(template, functionLogicalId(stack, functionId));
}

function environment(functionId: FunctionId): Record<string, unknown> {
  return (functionProps(functionId).Environment as { Variables: Record<string, unknown> }).Variables;
}

function queueLogicalId(queueId: QueueId): string {
  const queueName = physicalName(TEST_PREFIX, topology.queues[queueId].name);
  return logicalIdWhere(template, 'AWS::SQS::Queue', 'QueueName', queueName);
}

describe('functions', () => {
  it('builds one function per declaration', () => {
    template.resourceCountIs('AWS::Lambda::Function', FUNCTION_IDS.length);
  });

  it.each(FUNCTION_IDS)('runs %s on Node.js 22, arm64, with the declared size and limits', (functionId) => {
    const decl = topology.functions[functionId];
    const props = functionProps(functionId);
    expect(props).toMatchObject({
      Runtime: 'nodejs22.x',
      Architectures: ['arm64'],
      Handler: 'index.handler',
      MemorySize: decl.memoryMb,
      Timeout: decl.timeoutSeconds,
      Description: decl.description,
    });
    expect(props.ReservedConcurrentExecutions).toBe(decl.reservedConcurrency);
  });

  it.each(FUNCTION_IDS)(
    'gives %s the settings and the names of exactly the resources it may touch',
    (functionId) => {
      const env = environment(functionId);
      // Env vars naming the resources it is granted (the rule the local runtime applies too); every
      // other resource's variable must be absent.
      const resourceVariables = grantedEnvVars(topology, topology.functions[functionId].grants);
      expect(Object.keys(env).sort()).toEqual(
        [
          ...Object.keys(topology.settings),
          ...resourceVariables,
          'POWERTOOLS_SERVICE_NAME',
          'POWERTOOLS_TRACE_ENABLED',
          'NODE_OPTIONS',
        ].sort(),
      );
      for (const [name, value] of Object.entries(topology.settings)) expect(env[name]).toBe(value);
      expect(env.POWERTOOLS_SERVICE_NAME).toBe(`tinker-serverless-${functionId}`);
      // Resource variables are references to the deployed resources, never literals.
      for (const name of resourceVariables) expect(env[name]).toHaveProperty('Ref');
    },
  );

  it('keeps the prefixes table from the scheduler and the api, which learns the work queue for its depth only', () => {
    // The status page shows the queue's depth (grant `depth`: GetQueueAttributes, see iam.test.ts).
    expect(environment('api')).toHaveProperty('WORK_QUEUE_URL');
    // ...and both dead-letter queues' depths; no other function learns their URLs.
    expect(environment('api').WORK_DLQ_URL).toEqual({ Ref: queueLogicalId('workDlq') });
    expect(environment('api').STREAM_DLQ_URL).toEqual({ Ref: queueLogicalId('streamDlq') });
    for (const functionId of ['scheduler', 'worker', 'sweeper'] as const) {
      expect(environment(functionId)).not.toHaveProperty('WORK_DLQ_URL');
      expect(environment(functionId)).not.toHaveProperty('STREAM_DLQ_URL');
    }
    expect(environment('api')).not.toHaveProperty('PREFIXES_TABLE');
    expect(environment('scheduler')).toHaveProperty('WORK_QUEUE_URL');
    expect(environment('scheduler')).not.toHaveProperty('PREFIXES_TABLE');
    expect(environment('worker')).toHaveProperty('PREFIXES_TABLE');
  });

  it('logs each function to its own log group kept for a month', () => {
    for (const functionId of FUNCTION_IDS) {
      const logging = functionProps(functionId).LoggingConfig as { LogGroup: { Ref: string } };
      expect(properties(template, logging.LogGroup.Ref)).toMatchObject({ RetentionInDays: 30 });
    }
  });
});

describe('the tokenizerId option', () => {
  it('gives only the api function REFERENCE_TOKENIZER_ID, and nothing when unset', () => {
    const configured = synth({ tokenizerId: 'acme/byte-tokenizer' });
    for (const functionId of FUNCTION_IDS) {
      const props = properties(configured.template, functionLogicalId(configured.stack, functionId));
      const variables = (props.Environment as { Variables: Record<string, unknown> }).Variables;
      expect(variables.REFERENCE_TOKENIZER_ID, functionId).toBe(
        functionId === 'api' ? 'acme/byte-tokenizer' : undefined,
      );
      expect(environment(functionId).REFERENCE_TOKENIZER_ID).toBeUndefined();
    }
  });
});

describe('tracing (context tracing)', () => {
  /** Every action the role of `functionId` in `synthesized` is allowed, whatever the resource. */
  function roleActions(synthesized: ReturnType<typeof synth>, functionId: FunctionId): string[] {
    const props = properties(synthesized.template, functionLogicalId(synthesized.stack, functionId));
    const roleId = (props.Role as { 'Fn::GetAtt': [string] })['Fn::GetAtt'][0];
    const policies = Object.values(synthesized.template.findResources('AWS::IAM::Policy')) as {
      Properties: {
        Roles: { Ref: string }[];
        PolicyDocument: { Statement: { Action: string | string[] }[] };
      };
    }[];
    return policies
      .filter((policy) => policy.Properties.Roles.some((ref) => ref.Ref === roleId))
      .flatMap((policy) =>
        policy.Properties.PolicyDocument.Statement.flatMap((s) => ([] as string[]).concat(s.Action)),
      );
  }

  it('is active on every function by default, with the X-Ray grant and the Tracer switched on', () => {
    for (const functionId of FUNCTION_IDS) {
      expect(functionProps(functionId).TracingConfig, functionId).toEqual({ Mode: 'Active' });
      expect(environment(functionId).POWERTOOLS_TRACE_ENABLED).toBe('true');
      expect(roleActions({ stack, template } as ReturnType<typeof synth>, functionId)).toEqual(
        expect.arrayContaining(['xray:PutTraceSegments', 'xray:PutTelemetryRecords']),
      );
    }
  });

  it('is off everywhere with tracing=false: no tracing config, no X-Ray grant, the Tracer off', () => {
    const untraced = synth({ tracing: false });
    for (const functionId of FUNCTION_IDS) {
      const props = properties(untraced.template, functionLogicalId(untraced.stack, functionId));
      expect(props.TracingConfig, functionId).toBeUndefined();
      expect(
        (props.Environment as { Variables: Record<string, unknown> }).Variables.POWERTOOLS_TRACE_ENABLED,
      ).toBe('false');
      expect(roleActions(untraced, functionId).filter((action) => action.startsWith('xray:'))).toEqual([]);
    }
  });
});

describe('the baseModels option (G6)', () => {
  it('gives only the api function BASE_MODELS, and nothing when unset', () => {
    const models = JSON.stringify([{ name: 'Qwen/Qwen3-0.6B', tokenizer_id: 'Qwen/Qwen3-0.6B' }]);
    const configured = synth({ baseModels: models });
    for (const functionId of FUNCTION_IDS) {
      const props = properties(configured.template, functionLogicalId(configured.stack, functionId));
      const variables = (props.Environment as { Variables: Record<string, unknown> }).Variables;
      expect(variables.BASE_MODELS, functionId).toBe(functionId === 'api' ? models : undefined);
      expect(environment(functionId).BASE_MODELS).toBeUndefined();
    }
  });

  it('fails the synth on a malformed list, naming the variable', () => {
    expect(() => synth({ baseModels: '[{"tokenizer_id":"x"}]' })).toThrow(/BASE_MODELS entry 0 has no name/);
  });
});
