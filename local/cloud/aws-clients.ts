import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { S3Client } from '@aws-sdk/client-s3';
import { SQSClient } from '@aws-sdk/client-sqs';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { type AwsClients, dynamoClientSettings } from '../../shared/aws/clients.js';
import type { CloudEndpoints } from './cloud.js';
import { LOCAL_CREDENTIALS, LOCAL_REGION } from './resources.js';

/**
 * Clients bound to a local cloud by explicit endpoints, independent of process.env, for provisioning
 * and for tests that talk to the cloud directly. Same marshalling as `shared/aws/clients.ts`.
 */
export function localAwsClients(endpoints: CloudEndpoints): AwsClients {
  const common = { region: LOCAL_REGION, credentials: LOCAL_CREDENTIALS };
  const dynamo = new DynamoDBClient({ ...common, ...dynamoClientSettings, endpoint: endpoints.dynamodb });
  return {
    dynamo,
    doc: DynamoDBDocumentClient.from(dynamo, { marshallOptions: { removeUndefinedValues: true } }),
    s3: new S3Client({ ...common, endpoint: endpoints.s3, forcePathStyle: true }),
    sqs: new SQSClient({ ...common, endpoint: endpoints.sqs }),
  };
}
