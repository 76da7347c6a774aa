import { resetAwsClients } from '../../shared/aws/clients.js';
import { resetConfig } from '../../shared/base/config.js';
import { topology } from '../../shared/base/topology.js';
import { LOCAL_REGION } from '../cloud/resources.js';
import { installConfigScope } from './env-scope.js';
import { AccessPolicy, installGrantEnforcement, runAsFunction } from './grant-enforcement.js';
import { resourceIndex } from './iam-requests.js';

/**
 * `npm run worker` against the local stack runs as a GPU host with `ExternalWorkerPolicyArn` runs on
 * AWS: its SDK calls are checked against the worker's grants, and `config()` shows it the worker's
 * variables only (grant-enforcement.ts, env-scope.ts). DynamoDB Local and fauxqs check no permissions,
 * so without this a call the host's policy would deny would surface only on AWS. `env` names the
 * provisioned resources; the shared SDK clients are made anew, so they carry the check.
 */
export function runUnderWorkerGrants<T>(
  env: Readonly<Record<string, string | undefined>>,
  run: () => Promise<T>,
): Promise<T> {
  installGrantEnforcement();
  installConfigScope();
  resetConfig();
  resetAwsClients();
  const access = new AccessPolicy(topology, resourceIndex(topology, env, {}, env.AWS_REGION ?? LOCAL_REGION));
  return runAsFunction({ functionId: 'worker', access }, run);
}
