import { AsyncLocalStorage } from 'node:async_hooks';
import { DynamoDBServiceException } from '@aws-sdk/client-dynamodb';
import { S3ServiceException } from '@aws-sdk/client-s3';
import { SQSServiceException } from '@aws-sdk/client-sqs';
import type { HandlerExecutionContext } from '@smithy/types';
import { type AwsClients, onAwsClientsCreated } from '../../shared/aws/clients.js';
import { isAwsError } from '../../shared/base/errors.js';
import { grantsAllow } from '../../shared/base/grants.js';
import { logger } from '../../shared/base/logger.js';
import type { FunctionId, Topology } from '../../shared/base/topology.js';
import {
  type InitializeArgs,
  type InitializeNext,
  type InitializeOutput,
  initializeStackOf,
} from '../cloud/client-middleware.js';
import { type AwsService, iamRequestsFor, type LocalIamRequest, type ResourceIndex } from './iam-requests.js';

/**
 * IAM, locally: while a handler runs (the Invoker runs each one inside a function scope), every call
 * it makes through the project's SDK clients (`createAwsClients`, so `awsClients()`) is checked
 * against its function's `grants` in the topology, with the action tables the CDK builds its role
 * from (`shared/base/grants.ts`). A call the role would not allow fails as AWS fails it, before any
 * request is sent: `AccessDeniedException` (DynamoDB, SQS) or `AccessDenied` (S3), naming the
 * function, the action and the resource. And as on AWS, a GET of a missing object answers 403, not
 * 404, to a function that may not list the bucket. Calls outside a function scope (the runtime's
 * pollers, provisioning, test set-up) are not checked.
 */

/** The function a handler runs as, and the policy its calls are checked against (none: unchecked). */
export interface FunctionScope {
  readonly functionId: FunctionId;
  readonly access?: AccessPolicy;
}

const functionScope = new AsyncLocalStorage<FunctionScope>();

/** Runs `run` (and everything it starts) as `scope.functionId`. */
export function runAsFunction<T>(scope: FunctionScope, run: () => T): T {
  return functionScope.run(scope, run);
}

export function currentFunctionScope(): FunctionScope | undefined {
  return functionScope.getStore();
}

/** The topology's grants over the provisioned resources of one runtime. */
export class AccessPolicy {
  constructor(
    readonly topology: Topology,
    readonly resources: ResourceIndex,
  ) {}

  /** The first request of the call the function's grants do not allow, if any. */
  deniedRequest(
    functionId: FunctionId,
    service: AwsService,
    operation: string,
    input: Readonly<Record<string, unknown>>,
  ): LocalIamRequest | undefined {
    const grants = this.topology.functions[functionId].grants;
    return iamRequestsFor(service, operation, input, this.resources).find(
      (request) => !grantsAllow(grants, request, this.topology.tables),
    );
  }

  /** S3 answers 404 for a missing object only to a caller that may list the whole bucket. */
  maySeeMissingObjects(functionId: FunctionId): boolean {
    return grantsAllow(
      this.topology.functions[functionId].grants,
      { action: 's3:ListBucket', resource: { kind: 'bucket' } },
      this.topology.tables,
    );
  }
}

const SERVICES: Readonly<Record<string, AwsService>> = {
  DynamoDBClient: 'dynamodb',
  S3Client: 's3',
  SQSClient: 'sqs',
};

const MIDDLEWARE_NAME = 'localGrantEnforcement';

type Handler = InitializeNext;
type Args = InitializeArgs;
type Output = InitializeOutput;

function enforcement(next: Handler, context: HandlerExecutionContext): Handler {
  return async (args: Args): Promise<Output> => {
    const current = functionScope.getStore();
    const service = SERVICES[context.clientName ?? ''];
    const operation = context.commandName?.replace(/Command$/, '');
    if (current?.access === undefined || service === undefined || operation === undefined) return next(args);
    const scope = { functionId: current.functionId, access: current.access };
    const input = args.input as Readonly<Record<string, unknown>>;
    const denied = scope.access.deniedRequest(scope.functionId, service, operation, input);
    if (denied !== undefined) {
      // Logged as well as thrown: code that swallows the error (a best-effort clean-up) still shows it.
      logger.warn('local runtime: call denied by the function grants', {
        function: scope.functionId,
        action: denied.action,
        resource: denied.arn,
      });
      throw accessDenied(service, scope, denied, operation);
    }
    if (service !== 's3' || (operation !== 'GetObject' && operation !== 'HeadObject')) return next(args);
    try {
      return await next(args);
    } catch (error) {
      if (
        !isAwsError(error, 'NoSuchKey', 'NotFound') ||
        scope.access.maySeeMissingObjects(scope.functionId)
      ) {
        throw error;
      }
      const request = iamRequestsFor(service, operation, input, scope.access.resources)[0];
      if (request === undefined) throw error;
      logger.warn(
        'local runtime: a missing object answered 403, as to a function that may not list the bucket',
        {
          function: scope.functionId,
          resource: request.arn,
        },
      );
      throw accessDenied(service, scope, request, operation, true);
    }
  };
}

/** Adds the enforcement to a set of clients (the document client shares the DynamoDB client's stack). */
export function enforceGrantsOn(clients: AwsClients): void {
  for (const client of [clients.dynamo, clients.s3, clients.sqs]) {
    initializeStackOf(client).add(enforcement, {
      step: 'initialize',
      priority: 'high',
      name: MIDDLEWARE_NAME,
      override: true,
    });
  }
}

/**
 * Adds the enforcement to every set of clients `createAwsClients` makes from now on in this process.
 * It stays installed: outside a function scope with a policy it lets every call through.
 */
export function installGrantEnforcement(): void {
  onAwsClientsCreated(enforceGrantsOn);
}

function accessDenied(
  service: AwsService,
  scope: FunctionScope & { readonly access: AccessPolicy },
  request: LocalIamRequest,
  operation: string,
  missingObject = false,
): Error {
  const functionName = `local-${scope.functionId}`;
  const role = `arn:aws:sts::${scope.access.resources.account}:assumed-role/${functionName}/${functionName}`;
  const denied = `User: ${role} is not authorized to perform: ${request.action} on resource: ${request.arn} (${operation})`;
  const message = missingObject
    ? `${denied}: the object does not exist, and S3 answers 403 rather than 404 to a caller that may not` +
      ` list the bucket (s3:ListBucket), which the ${scope.functionId} function's grants do not include`
    : `${denied} because no identity-based policy allows the ${request.action} action: the` +
      ` ${scope.functionId} function's grants in shared/base/topology.ts do not include it`;
  const metadata = { httpStatusCode: service === 'dynamodb' ? 400 : 403, attempts: 1, totalRetryDelay: 0 };
  switch (service) {
    case 'dynamodb':
      return new DynamoDBServiceException({
        name: 'AccessDeniedException',
        $fault: 'client',
        $metadata: metadata,
        message,
      });
    case 's3':
      return new S3ServiceException({ name: 'AccessDenied', $fault: 'client', $metadata: metadata, message });
    case 'sqs':
      return new SQSServiceException({
        name: 'AccessDeniedException',
        $fault: 'client',
        $metadata: metadata,
        message,
      });
  }
}
