import { describe, expect, it } from 'vitest';
import { DEPLOY_LIMIT_DEFAULTS, readDeployContext } from '../../shared/base/config.js';
import { topology } from '../../shared/base/topology.js';
import { editableTopology } from '../support/cdk/editable-topology.js';
import { functionLogicalId, properties, synth } from '../support/cdk/synth.js';

/**
 * Throttles and reserved concurrency in the synthesized stack (hardening finding 1): the stage's
 * default throttle, the api and worker reserved concurrency beside the scheduler's and sweeper's,
 * and the api's quota variables, all set by a deployer through CDK context (cdk/app.ts).
 */

const defaults = readDeployContext(() => undefined).limits;

function stageOf(template: ReturnType<typeof synth>['template']): Record<string, unknown> {
  const [stageId, ...others] = Object.keys(template.findResources('AWS::ApiGatewayV2::Stage'));
  expect(others).toEqual([]);
  return properties(template, stageId!);
}

function functionOf(synthesized: ReturnType<typeof synth>, id: 'api' | 'worker' | 'scheduler' | 'sweeper') {
  return properties(synthesized.template, functionLogicalId(synthesized.stack, id));
}

describe('deploy-time limits', () => {
  const synthesized = synth();

  it('throttles the whole stage by default, every route and client together', () => {
    expect(stageOf(synthesized.template).DefaultRouteSettings).toEqual({
      ThrottlingRateLimit: DEPLOY_LIMIT_DEFAULTS.apiRatePerSecond[1],
      ThrottlingBurstLimit: DEPLOY_LIMIT_DEFAULTS.apiBurst[1],
    });
    expect(defaults).toMatchObject({ apiRatePerSecond: 500, apiBurst: 1000 });
  });

  it('reserves concurrency for every function, so none can starve another', () => {
    expect(functionOf(synthesized, 'api').ReservedConcurrentExecutions).toBe(500);
    expect(functionOf(synthesized, 'worker').ReservedConcurrentExecutions).toBe(8);
    expect(functionOf(synthesized, 'scheduler').ReservedConcurrentExecutions).toBe(
      topology.functions.scheduler.reservedConcurrency,
    );
    expect(functionOf(synthesized, 'sweeper').ReservedConcurrentExecutions).toBe(
      topology.functions.sweeper.reservedConcurrency,
    );
    // The worker's reservation covers its queue pollers: none of their deliveries is throttled.
    const queue = topology.functions.worker.triggers.find((trigger) => trigger.kind === 'queue');
    expect(queue?.kind === 'queue' && queue.maxConcurrency).toBeLessThanOrEqual(8);
  });

  it('takes every limit from context values, and passes the quotas to the api function only', () => {
    const context: Record<string, string> = {
      apiRatePerSecond: '40',
      apiBurst: '80',
      apiReservedConcurrency: '50',
      workerReservedConcurrency: '12',
      submitsPerSecond: '20',
      longPollsPerTenant: '6',
    };
    const { limits, apiQuotaEnv } = readDeployContext((key) => context[key]);
    const custom = synth({ limits, apiQuotaEnv });
    expect(stageOf(custom.template).DefaultRouteSettings).toEqual({
      ThrottlingRateLimit: 40,
      ThrottlingBurstLimit: 80,
    });
    expect(functionOf(custom, 'api').ReservedConcurrentExecutions).toBe(50);
    expect(functionOf(custom, 'worker').ReservedConcurrentExecutions).toBe(12);
    const env = (id: 'api' | 'worker') =>
      (functionOf(custom, id).Environment as { Variables: Record<string, unknown> }).Variables;
    expect(env('api')).toMatchObject({ SUBMITS_PER_SECOND: '20', LONG_POLLS_PER_TENANT: '6' });
    // Unset ones keep the function's own default (nothing passed).
    expect(env('api')).not.toHaveProperty('OPERATOR_READS_PER_SECOND');
    expect(env('worker')).not.toHaveProperty('SUBMITS_PER_SECOND');
  });

  it('refuses a worker reservation below its queue pollers, which would send deliveries to the DLQ', () => {
    expect(() => synth({ limits: { ...defaults, workerReservedConcurrency: 4 } })).toThrow(
      /worker reserves 4 concurrent executions, below its queue trigger's maxConcurrency 8/,
    );
    // A variant topology with fewer pollers takes the smaller reservation.
    const fewer = editableTopology();
    const queue = fewer.functions.worker.triggers.find((trigger) => trigger.kind === 'queue');
    if (queue?.kind !== 'queue') throw new Error('the worker has a queue trigger');
    queue.maxConcurrency = 2;
    const small = synth({ topology: fewer, limits: { ...defaults, workerReservedConcurrency: 2 } });
    expect(functionOf(small, 'worker').ReservedConcurrentExecutions).toBe(2);
  });
});
