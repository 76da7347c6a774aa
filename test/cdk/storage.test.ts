import { RemovalPolicy } from 'aws-cdk-lib';
import { Match } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { WORK_ITEM_PREFIX } from '../../cdk/constructs/bucket.js';
import { storageKeys } from '../../shared/base/storage-keys.js';
import { LANE_QUEUE_IDS, physicalName, QUEUE_IDS, topology } from '../../shared/base/topology.js';
import { logicalIdWhere, properties, synth, TEST_PREFIX } from '../support/cdk/synth.js';

const { template } = synth();

/** The statement `enforceSSL` must produce: any request without TLS is denied, whoever makes it. */
const TLS_DENY = {
  Effect: 'Deny',
  Principal: { AWS: '*' },
  Condition: { Bool: { 'aws:SecureTransport': 'false' } },
};

function queueLogicalId(queueId: (typeof QUEUE_IDS)[number]): string {
  return logicalIdWhere(
    template,
    'AWS::SQS::Queue',
    'QueueName',
    physicalName(TEST_PREFIX, topology.queues[queueId].name),
  );
}

describe('bucket', () => {
  it('blocks all public access, encrypts with S3-managed keys and keeps no versions', () => {
    template.resourceCountIs('AWS::S3::Bucket', 1);
    template.hasResourceProperties('AWS::S3::Bucket', {
      PublicAccessBlockConfiguration: {
        BlockPublicAcls: true,
        BlockPublicPolicy: true,
        IgnorePublicAcls: true,
        RestrictPublicBuckets: true,
      },
      BucketEncryption: {
        ServerSideEncryptionConfiguration: [{ ServerSideEncryptionByDefault: { SSEAlgorithm: 'AES256' } }],
      },
      VersioningConfiguration: Match.absent(),
    });
  });

  it('denies every request made without TLS', () => {
    template.hasResourceProperties('AWS::S3::BucketPolicy', {
      PolicyDocument: { Statement: Match.arrayWith([Match.objectLike({ ...TLS_DENY, Action: 's3:*' })]) },
    });
  });

  it('expires work items, and only work items, after a week', () => {
    expect(storageKeys.workItem('w-1').startsWith(WORK_ITEM_PREFIX)).toBe(true);
    const [bucketId] = Object.keys(template.findResources('AWS::S3::Bucket'));
    const rules = (
      properties(template, bucketId!).LifecycleConfiguration as { Rules: Record<string, unknown>[] }
    ).Rules;
    const expiring = rules.filter((rule) => rule.ExpirationInDays !== undefined);
    expect(expiring).toHaveLength(1);
    expect(expiring[0]).toMatchObject({ Prefix: 'work/', ExpirationInDays: 7, Status: 'Enabled' });
  });
});

describe('queues', () => {
  it('builds one queue per declaration with its visibility and retention, SQS-encrypted', () => {
    template.resourceCountIs('AWS::SQS::Queue', QUEUE_IDS.length);
    for (const queueId of QUEUE_IDS) {
      const decl = topology.queues[queueId];
      expect(properties(template, queueLogicalId(queueId))).toMatchObject({
        VisibilityTimeout: decl.visibilityTimeoutSeconds,
        MessageRetentionPeriod: decl.retentionSeconds,
        SqsManagedSseEnabled: true,
      });
    }
  });

  it('redrives work to its dead-letter queue after the declared receive count', () => {
    const deadLetter = topology.queues.work.deadLetter!;
    expect(properties(template, queueLogicalId('work')).RedrivePolicy).toEqual({
      deadLetterTargetArn: { 'Fn::GetAtt': [queueLogicalId(deadLetter.queue), 'Arn'] },
      maxReceiveCount: deadLetter.maxReceiveCount,
    });
    expect(properties(template, queueLogicalId('workDlq')).RedrivePolicy).toBeUndefined();
  });

  it('keeps stream failure records two weeks, encrypted, in a queue of their own', () => {
    expect(properties(template, queueLogicalId('streamDlq'))).toMatchObject({
      QueueName: physicalName(TEST_PREFIX, 'stream-dlq'),
      MessageRetentionPeriod: 14 * 24 * 3600,
      SqsManagedSseEnabled: true,
    });
    expect(properties(template, queueLogicalId('streamDlq')).RedrivePolicy).toBeUndefined();
  });

  it('denies every request made without TLS, on each queue', () => {
    for (const queueId of QUEUE_IDS) {
      template.hasResourceProperties('AWS::SQS::QueuePolicy', {
        Queues: [{ Ref: queueLogicalId(queueId) }],
        PolicyDocument: { Statement: Match.arrayWith([Match.objectLike({ ...TLS_DENY, Action: 'sqs:*' })]) },
      });
    }
  });
});

describe('removal policy', () => {
  it('retains data by default and deletes it, emptying the bucket first, when asked to', () => {
    template.allResources('AWS::S3::Bucket', { DeletionPolicy: 'Retain' });
    template.allResources('AWS::SQS::Queue', { DeletionPolicy: 'Delete' });
    template.resourceCountIs('Custom::S3AutoDeleteObjects', 0);
    const { template: disposable } = synth({ removalPolicy: RemovalPolicy.DESTROY });
    disposable.allResources('AWS::DynamoDB::Table', { DeletionPolicy: 'Delete' });
    disposable.allResources('AWS::S3::Bucket', { DeletionPolicy: 'Delete' });
    disposable.resourceCountIs('Custom::S3AutoDeleteObjects', 1);
  });
});

describe('outputs', () => {
  it('names every table, the bucket and every queue', () => {
    const outputs = Object.keys(template.findOutputs('*')).sort();
    expect(outputs).toEqual(
      [
        'ApiUrl',
        'FuturesTableName',
        'ModelsTableName',
        'RegistryTableName',
        'PrefixesTableName',
        'DataBucketName',
        'WorkQueueUrl',
        'WorkDlqQueueUrl',
        'StreamDlqQueueUrl',
        // The work lanes (S2).
        ...LANE_QUEUE_IDS.map((lane) => `Lane${lane.slice('lane'.length)}QueueUrl`),
        // Operating outputs (test/cdk/operate.test.ts checks what they hold).
        'AlarmTopicArn',
        'DashboardUrl',
        'OperatorEnv',
        'WorkerEnv',
        'WorkerMode',
        'ExternalWorkerPolicyArn',
      ].sort(),
    );
  });
});
