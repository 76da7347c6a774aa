import { Aws, Duration, RemovalPolicy } from 'aws-cdk-lib';
import * as s3 from 'aws-cdk-lib/aws-s3';
import { Construct } from 'constructs';
import { type BucketDecl, physicalName } from '../../shared/base/topology.js';

/** Key prefix of work items (`storageKeys.workItem`); they are only needed while a tick's work runs. */
export const WORK_ITEM_PREFIX = 'work/';

const WORK_ITEM_EXPIRY = Duration.days(7);

export interface DataBucketProps {
  readonly decl: BucketDecl;
  readonly namePrefix: string;
  readonly removalPolicy: RemovalPolicy;
}

/** The private data bucket: payloads, results, work items, model state and checkpoints. */
export class DataBucket extends Construct {
  readonly bucket: s3.Bucket;

  constructor(scope: Construct, id: string, props: DataBucketProps) {
    super(scope, id);
    const destroy = props.removalPolicy === RemovalPolicy.DESTROY;
    this.bucket = new s3.Bucket(this, 'Bucket', {
      // Bucket names are global: account and region keep two deployments of one prefix apart.
      bucketName: physicalName(`${props.namePrefix}-${Aws.ACCOUNT_ID}-${Aws.REGION}`, props.decl.name),
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      enforceSSL: true,
      encryption: s3.BucketEncryption.S3_MANAGED,
      versioned: false,
      lifecycleRules: [
        { id: 'expire-work-items', prefix: WORK_ITEM_PREFIX, expiration: WORK_ITEM_EXPIRY },
        { id: 'abort-incomplete-uploads', abortIncompleteMultipartUploadAfter: Duration.days(1) },
      ],
      removalPolicy: props.removalPolicy,
      // A bucket that still holds objects cannot be deleted, so a destroyable stack empties it first.
      autoDeleteObjects: destroy,
    });
  }
}
