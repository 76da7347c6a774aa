import { App, RemovalPolicy } from 'aws-cdk-lib';
import { readDeployContext, readGpuWorkersContext } from '../shared/base/config.js';
import { topology } from '../shared/base/topology.js';
import { addNagChecks } from './nag.js';
import { TinkerServerlessStack } from './stack.js';
import { withoutIndexes } from './staging.js';

/**
 * The CDK app. Options come from context (`cdk.json` or `-c key=value`):
 * - `stackName` (default `tinker-serverless`), `namePrefix` (default: the stack name)
 * - `referenceWorker` (default true, false with `gpuWorkers`): deploy the reference CPU worker Lambda
 * - `gpuWorkers` (default unset): the GPU worker fleet, `true` or a JSON object of
 *   `GpuWorkersConfig` (shared/base/config.ts; cdk/constructs/gpu-workers.ts)
 * - `removalPolicy`: `retain` (default) or `destroy`, for the tables, bucket and log groups
 * - `tokenizerId` (default unset): get_info's tokenizer_id, an id the clients can load (see the stack)
 * - `tracing` (default true): X-Ray active tracing on every function; `-c tracing=false` turns it off
 * - `baseModels` (default unset: the reference model): the pool's base models, a JSON list of
 *   `{"name", "tokenizer_id"?, "max_context_length"?}` (BASE_MODELS, shared/base/config.ts; G6)
 * - `omitIndexes` (default unset): comma-separated index names left out of this deploy, to add a
 *   table's indexes one stack update at a time (cdk/staging.ts)
 * - the limits (docs/configuration.md#limits): `apiRatePerSecond`, `apiBurst`, `apiReservedConcurrency`,
 *   `workerReservedConcurrency`, and the api's quotas `submitsPerSecond`, `longPollsPerTenant`,
 *   `operatorReadsPerSecond`, and `apiKeyCacheSeconds` and `pollSlotAfterMs` (0 turns either off;
 *   defaults in shared/base/config.ts)
 * The stack is environment-agnostic, so synth needs no account, region or lookup. Synthesis runs
 * cdk-nag's AwsSolutions checks and stops on any finding not acknowledged in `nag.ts`.
 */
const app = new App();

function context(key: string): string | undefined {
  const value: unknown = app.node.tryGetContext(key);
  if (value === undefined || value === null) return undefined;
  return String(value);
}

const removalPolicyName = context('removalPolicy') ?? 'retain';
if (removalPolicyName !== 'retain' && removalPolicyName !== 'destroy') {
  throw new Error(`Context removalPolicy must be retain or destroy, got "${removalPolicyName}"`);
}

const tracingSetting = context('tracing') ?? 'true';
if (tracingSetting !== 'true' && tracingSetting !== 'false') {
  throw new Error(`Context tracing must be true or false, got "${tracingSetting}"`);
}

const { limits, apiQuotaEnv } = readDeployContext((key) => app.node.tryGetContext(key));

const gpuWorkers = readGpuWorkersContext((key) => app.node.tryGetContext(key));
// A fleet replaces the reference worker Lambda, which would otherwise answer for every model name.
const referenceWorkerSetting = context('referenceWorker') ?? (gpuWorkers === undefined ? 'true' : 'false');

const omitIndexes = (context('omitIndexes') ?? '')
  .split(',')
  .map((name) => name.trim())
  .filter((name) => name !== '');

const stack = new TinkerServerlessStack(app, 'TinkerServerless', {
  ...(omitIndexes.length > 0 ? { topology: withoutIndexes(topology, omitIndexes) } : {}),
  limits,
  apiQuotaEnv,
  stackName: context('stackName') ?? 'tinker-serverless',
  namePrefix: context('namePrefix'),
  referenceWorker: referenceWorkerSetting !== 'false',
  ...(gpuWorkers === undefined ? {} : { gpuWorkers }),
  tracing: tracingSetting === 'true',
  removalPolicy: removalPolicyName === 'destroy' ? RemovalPolicy.DESTROY : RemovalPolicy.RETAIN,
  tokenizerId: context('tokenizerId'),
  baseModels: context('baseModels'),
  description: 'tinker-serverless: Tinker-compatible control plane for multi-LoRA training and sampling',
});

addNagChecks(app, [stack]);
app.synth();
