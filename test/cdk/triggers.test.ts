import { Match } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { physicalName, type QueueId, type TableId, topology } from '../../shared/base/topology.js';
import { editableTopology } from '../support/cdk/editable-topology.js';
import { functionLogicalId, logicalIdWhere, properties, synth, TEST_PREFIX } from '../support/cdk/synth.js';

const { stack, template } = synth();

type Mapping = Record<string, unknown>;

function mappingsOf(functionId: 'scheduler' | 'worker'): Mapping[] {
  const functionRef = { Ref: functionLogicalId(stack, functionId) };
  return Object.values(template.findResources('AWS::Lambda::EventSourceMapping'))
    .map((resource) => resource.Properties as Mapping)
    .filter((props) => JSON.stringify(props.FunctionName) === JSON.stringify(functionRef));
}

function queueLogicalId(queueId: QueueId): string {
  return logicalIdWhere(
    template,
    'AWS::SQS::Queue',
    'QueueName',
    physicalName(TEST_PREFIX, topology.queues[queueId].name),
  );
}

function tableLogicalId(tableId: TableId): string {
  const name = physicalName(TEST_PREFIX, topology.tables[tableId].name);
  return logicalIdWhere(template, 'AWS::DynamoDB::Table', 'TableName', name);
}

describe('triggers', () => {
  it('maps the futures and models streams to the scheduler with the declared settings and filters', () => {
    const mappings = mappingsOf('scheduler');
    const streamTriggers = topology.functions.scheduler.triggers.filter((t) => t.kind === 'stream');
    expect(mappings).toHaveLength(streamTriggers.length);
    for (const trigger of streamTriggers) {
      const streamArn = { 'Fn::GetAtt': [tableLogicalId(trigger.table), 'StreamArn'] };
      const mapping = mappings.find((m) => JSON.stringify(m.EventSourceArn) === JSON.stringify(streamArn));
      expect(mapping, `mapping for the ${trigger.table} stream`).toBeDefined();
      expect(mapping).toMatchObject({
        BatchSize: trigger.batchSize,
        MaximumBatchingWindowInSeconds: trigger.maxBatchingWindowSeconds,
        StartingPosition: trigger.startingPosition,
        MaximumRetryAttempts: trigger.retryAttempts,
        BisectBatchOnFunctionError: trigger.bisectBatchOnError,
        ParallelizationFactor: trigger.parallelizationFactor ?? 1,
        FunctionResponseTypes: ['ReportBatchItemFailures'],
        DestinationConfig: {
          OnFailure: { Destination: { 'Fn::GetAtt': [queueLogicalId(trigger.onFailure), 'Arn'] } },
        },
      });
      // The deployed filters are the very patterns the local runtime evaluates.
      const filters = (mapping!.FilterCriteria as { Filters: { Pattern: string }[] }).Filters;
      expect(filters.map((f) => JSON.parse(f.Pattern))).toEqual(trigger.filters);
    }
  });

  it('holds no step back for a batching window: every stream and queue mapping on the step path answers at once', () => {
    // A window makes every record of an idle system wait its full length (docs/architecture.md#the-wake-up-path).
    const mappings = [...mappingsOf('scheduler'), ...mappingsOf('worker')];
    expect(mappings).toHaveLength(4);
    for (const mapping of mappings) {
      expect(mapping.MaximumBatchingWindowInSeconds ?? 0).toBe(0);
    }
  });

  it('bisects a failing stream batch and reports what it gives up on to the stream DLQ, never silently', () => {
    const streamMappings = mappingsOf('scheduler');
    expect(streamMappings).toHaveLength(3);
    for (const mapping of streamMappings) {
      expect(mapping.BisectBatchOnFunctionError).toBe(true);
      expect(mapping.MaximumRetryAttempts).toBeGreaterThan(0);
      expect(mapping.DestinationConfig).toEqual({
        OnFailure: { Destination: { 'Fn::GetAtt': [queueLogicalId('streamDlq'), 'Arn'] } },
      });
    }
    expect(topology.queues.streamDlq).toMatchObject({ name: 'stream-dlq', retentionSeconds: 14 * 24 * 3600 });
  });

  it('filters the models stream to commits and re-plans: inflight removed by a MODIFY', () => {
    const streamArn = { 'Fn::GetAtt': [tableLogicalId('models'), 'StreamArn'] };
    const mapping = mappingsOf('scheduler').find(
      (m) => JSON.stringify(m.EventSourceArn) === JSON.stringify(streamArn),
    );
    const pattern = JSON.parse(
      (mapping!.FilterCriteria as { Filters: { Pattern: string }[] }).Filters[0]!.Pattern,
    );
    expect(pattern).toEqual({
      eventName: ['MODIFY'],
      dynamodb: {
        OldImage: { inflight: { S: [{ exists: true }] } },
        NewImage: { inflight: { S: [{ exists: false }] } },
      },
    });
  });

  it('wakes the scheduler when the drain record of the pool is deleted, and on no other registry write', () => {
    const registry = tableLogicalId('registry');
    const table = template.findResources('AWS::DynamoDB::Table')[registry]?.Properties as Mapping;
    expect(table.StreamSpecification).toEqual({ StreamViewType: 'KEYS_ONLY' });
    const streamArn = { 'Fn::GetAtt': [registry, 'StreamArn'] };
    const mapping = mappingsOf('scheduler').find(
      (m) => JSON.stringify(m.EventSourceArn) === JSON.stringify(streamArn),
    );
    const filters = (mapping!.FilterCriteria as { Filters: { Pattern: string }[] }).Filters;
    expect(filters.map((filter) => JSON.parse(filter.Pattern))).toEqual([
      { eventName: ['REMOVE'], dynamodb: { Keys: { pk: { S: [`drain#${topology.settings.POOL}`] } } } },
    ]);
  });

  it('bounds the worker through the SQS mapping; its reservation is a guarantee, at least that (E7)', () => {
    const [mapping, ...others] = mappingsOf('worker');
    expect(others).toEqual([]);
    const queueName = physicalName(TEST_PREFIX, topology.queues.work.name);
    expect(mapping).toMatchObject({
      EventSourceArn: {
        'Fn::GetAtt': [logicalIdWhere(template, 'AWS::SQS::Queue', 'QueueName', queueName), 'Arn'],
      },
      BatchSize: 1,
      ScalingConfig: { MaximumConcurrency: 8 },
      FunctionResponseTypes: ['ReportBatchItemFailures'],
    });
    expect(
      properties(template, functionLogicalId(stack, 'worker')).ReservedConcurrentExecutions,
    ).toBeGreaterThanOrEqual(8);
  });

  it('routes every HTTP request to the api function and outputs the URL', () => {
    template.resourceCountIs('AWS::ApiGatewayV2::Api', 1);
    template.hasResourceProperties('AWS::ApiGatewayV2::Route', { RouteKey: '$default' });
    template.hasResourceProperties('AWS::ApiGatewayV2::Integration', {
      IntegrationType: 'AWS_PROXY',
      PayloadFormatVersion: '2.0',
      IntegrationUri: { 'Fn::GetAtt': [functionLogicalId(stack, 'api'), 'Arn'] },
    });
    template.hasOutput('ApiUrl', { Value: { 'Fn::GetAtt': [Match.anyValue(), 'ApiEndpoint'] } });
  });

  it('declares the status page routes on the api function, none throttled by API Gateway alone', () => {
    const routes = Object.entries(template.findResources('AWS::ApiGatewayV2::Route')).map(
      ([id, resource]) => ({
        id,
        key: (resource.Properties as { RouteKey: string }).RouteKey,
        target: JSON.stringify((resource.Properties as { Target: unknown }).Target),
      }),
    );
    expect(routes.map((route) => route.key).sort()).toEqual(
      ['$default', 'GET /status', 'GET /status/data', 'GET /status/{asset}'].sort(),
    );
    // One integration, the api function's, behind every route.
    template.resourceCountIs('AWS::ApiGatewayV2::Integration', 1);
    expect(new Set(routes.map((route) => route.target)).size).toBe(1);

    const [stageId, ...otherStages] = Object.keys(template.findResources('AWS::ApiGatewayV2::Stage'));
    expect(otherStages).toEqual([]);
    // The operators' budget is counted by the function after the key check (hardening finding 6): a
    // route throttle would let unauthenticated requests use it up.
    expect(properties(template, stageId!).RouteSettings).toBeUndefined();
  });

  it('gives a route declared with a throttle its own stage route settings, after the route exists', () => {
    const throttled = editableTopology();
    const http = throttled.functions.api.triggers[0]!;
    if (http.kind !== 'http' || http.routes === undefined) throw new Error('the api trigger is http');
    const data = http.routes.find((route) => route.path === '/status/data')!;
    data.throttle = { ratePerSecond: 5, burst: 10 };
    const { template: variant } = synth({ topology: throttled });
    const [stageId] = Object.keys(variant.findResources('AWS::ApiGatewayV2::Stage'));
    expect(properties(variant, stageId!).RouteSettings).toEqual({
      'GET /status/data': { ThrottlingRateLimit: 5, ThrottlingBurstLimit: 10 },
    });
    // The stage refers to the route key, so CloudFormation must create the route first.
    const [dataRouteId] = Object.entries(variant.findResources('AWS::ApiGatewayV2::Route')).find(
      ([, resource]) => (resource.Properties as { RouteKey: string }).RouteKey === 'GET /status/data',
    )!;
    const stage = variant.toJSON().Resources[stageId!] as { DependsOn?: string[] };
    expect(stage.DependsOn).toContain(dataRouteId);
  });

  it('refuses a declared route outside its base path, which the local runtime would not route', () => {
    const outside = editableTopology();
    const http = outside.functions.api.triggers[0]!;
    if (http.kind !== 'http') throw new Error('the api trigger is http');
    http.basePath = '/api';
    expect(() => synth({ topology: outside })).toThrow(
      /GET \/status of api is not under its base path \/api/,
    );
  });

  it('ticks the sweeper every minute', () => {
    template.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(1 minute)',
      Targets: [Match.objectLike({ Arn: { 'Fn::GetAtt': [functionLogicalId(stack, 'sweeper'), 'Arn'] } })],
    });
  });

  it('leaves the queue to external workers when the reference worker is off', () => {
    const { stack: gpuStack, template: gpu } = synth({ referenceWorker: false });
    expect(gpuStack.functions.worker).toBeUndefined();
    gpu.resourceCountIs('AWS::Lambda::Function', 3);
    expect(
      Object.values(gpu.findResources('AWS::Lambda::EventSourceMapping')).filter(
        (r) => (r.Properties as Mapping).ScalingConfig !== undefined,
      ),
    ).toEqual([]);
    gpu.hasOutput('WorkQueueUrl', Match.anyValue());
  });

  it('refuses a queue that would redeliver a message while its function still runs', () => {
    const shortVisibility = editableTopology();
    shortVisibility.queues.work.visibilityTimeoutSeconds = 60;
    expect(() => synth({ topology: shortVisibility })).toThrow(/hides messages for 60s/);
  });

  it('refuses a stream filter on an image the stream does not carry', () => {
    const newImageOnly = editableTopology();
    newImageOnly.tables.models.stream = 'NEW_IMAGE';
    expect(() => synth({ topology: newImageOnly })).toThrow(/OldImage, absent from NEW_IMAGE/);
  });
});
