import { Duration, RemovalPolicy } from 'aws-cdk-lib';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { physicalName, type QueueId, type Topology } from '../../shared/base/topology.js';
import { mapRecord, pascalCase } from './records.js';

export interface TopologyQueuesProps {
  readonly queues: Topology['queues'];
  readonly namePrefix: string;
}

/** One SQS queue per queue declaration; a dead-letter queue is created before the queues it serves. */
export class TopologyQueues extends Construct {
  readonly byId: Readonly<Record<QueueId, sqs.Queue>>;

  constructor(scope: Construct, id: string, props: TopologyQueuesProps) {
    super(scope, id);
    const created = new Map<QueueId, sqs.Queue>();
    const create = (queueId: QueueId, chain: readonly QueueId[]): sqs.Queue => {
      const existing = created.get(queueId);
      if (existing) return existing;
      if (chain.includes(queueId)) {
        throw new Error(`Dead-letter queues form a cycle: ${[...chain, queueId].join(' -> ')}`);
      }
      const decl = props.queues[queueId];
      const deadLetter = decl.deadLetter;
      const queue = new sqs.Queue(this, pascalCase(queueId), {
        queueName: physicalName(props.namePrefix, decl.name),
        visibilityTimeout: Duration.seconds(decl.visibilityTimeoutSeconds),
        retentionPeriod: Duration.seconds(decl.retentionSeconds),
        encryption: sqs.QueueEncryption.SQS_MANAGED,
        enforceSSL: true,
        deadLetterQueue: deadLetter && {
          queue: create(deadLetter.queue, [...chain, queueId]),
          maxReceiveCount: deadLetter.maxReceiveCount,
        },
        // Messages are transient; a retained queue would only block the next deployment of its name.
        removalPolicy: RemovalPolicy.DESTROY,
      });
      created.set(queueId, queue);
      return queue;
    };
    this.byId = mapRecord(props.queues, (queueId) => create(queueId, []));
  }
}
