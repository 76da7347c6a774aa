import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { SQSClient } from '@aws-sdk/client-sqs';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { config } from '../base/config.js';
import { captureClient } from './tracer.js';

/**
 * SDK clients, created once per container and shared. Endpoints come from the SDK's own
 * `AWS_ENDPOINT_URL[_<SERVICE>]` variables; nothing here names a host. Every adapter takes an
 * optional client instead, so tests can inject one (for example with fault-injecting middleware).
 */
export interface AwsClients {
  readonly dynamo: DynamoDBClient;
  readonly doc: DynamoDBDocumentClient;
  readonly s3: S3Client;
  readonly sqs: SQSClient;
}

/**
 * DynamoDB client settings every client of the project shares. `base64Decoder`: Binary attributes
 * decoded by Buffer alone, without the SDK's regular-expression check of every string, which cost a
 * third of a prefix restore's CPU on megabytes of rows. Integrity does not rest on that check: TLS
 * covers the wire, and prefix rows carry digests that are verified before use (P4a).
 */
export const dynamoClientSettings = {
  base64Decoder: (input: string): Uint8Array => {
    const bytes = Buffer.from(input, 'base64');
    return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  },
} as const;

/** Each client traced by X-Ray when tracing is on (`tracer.ts`); the document client shares the DynamoDB client's. */
export function createAwsClients(options: { s3ForcePathStyle?: boolean } = {}): AwsClients {
  const dynamo = captureClient(new DynamoDBClient({ ...dynamoClientSettings }));
  const clients: AwsClients = {
    dynamo,
    doc: DynamoDBDocumentClient.from(dynamo, { marshallOptions: { removeUndefinedValues: true } }),
    s3: captureClient(
      new S3Client({ forcePathStyle: options.s3ForcePathStyle ?? config().s3ForcePathStyle }),
    ),
    sqs: captureClient(new SQSClient({})),
  };
  clientsCreated?.(clients);
  return clients;
}

let clientsCreated: ((clients: AwsClients) => void) | undefined;

/**
 * Local only: the local runtime adds its grant enforcement (local/runtime/grant-enforcement.ts) to every set
 * of clients created from then on. Nothing sets it on AWS, where clients are exactly as created above.
 */
export function onAwsClientsCreated(hook: ((clients: AwsClients) => void) | undefined): void {
  clientsCreated = hook;
}

let shared: AwsClients | undefined;

export function awsClients(): AwsClients {
  shared ??= createAwsClients();
  return shared;
}

/** For the local runtime and tests, which point the process at a new cloud. */
export function resetAwsClients(): void {
  shared = undefined;
}
