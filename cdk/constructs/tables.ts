import type { RemovalPolicy } from 'aws-cdk-lib';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import { Construct } from 'constructs';
import {
  type AttributeType,
  type IndexDecl,
  type KeyAttribute,
  physicalName,
  type StreamView,
  type TableDecl,
  type TableId,
  type Topology,
} from '../../shared/base/topology.js';
import { mapRecord, pascalCase } from './records.js';

const ATTRIBUTE_TYPES: Record<AttributeType, dynamodb.AttributeType> = {
  S: dynamodb.AttributeType.STRING,
  N: dynamodb.AttributeType.NUMBER,
  B: dynamodb.AttributeType.BINARY,
};

const STREAM_VIEWS: Record<StreamView, dynamodb.StreamViewType> = {
  NEW_IMAGE: dynamodb.StreamViewType.NEW_IMAGE,
  OLD_IMAGE: dynamodb.StreamViewType.OLD_IMAGE,
  NEW_AND_OLD_IMAGES: dynamodb.StreamViewType.NEW_AND_OLD_IMAGES,
  KEYS_ONLY: dynamodb.StreamViewType.KEYS_ONLY,
};

export interface TopologyTablesProps {
  readonly tables: Topology['tables'];
  readonly namePrefix: string;
  readonly removalPolicy: RemovalPolicy;
}

/** One DynamoDB table per table declaration, with its indexes, stream and TTL. */
export class TopologyTables extends Construct {
  readonly byId: Readonly<Record<TableId, dynamodb.Table>>;

  constructor(scope: Construct, id: string, props: TopologyTablesProps) {
    super(scope, id);
    this.byId = mapRecord(props.tables, (tableId, decl) => this.createTable(tableId, decl, props));
  }

  private createTable(tableId: TableId, decl: TableDecl, props: TopologyTablesProps): dynamodb.Table {
    const table = new dynamodb.Table(this, pascalCase(tableId), {
      tableName: physicalName(props.namePrefix, decl.name),
      partitionKey: keyAttribute(decl.partitionKey),
      sortKey: decl.sortKey && keyAttribute(decl.sortKey),
      billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
      timeToLiveAttribute: decl.timeToLiveAttribute,
      stream: decl.stream && STREAM_VIEWS[decl.stream],
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      encryption: dynamodb.TableEncryption.AWS_MANAGED,
      removalPolicy: props.removalPolicy,
    });
    for (const index of decl.indexes) table.addGlobalSecondaryIndex(indexProps(index));
    return table;
  }
}

function keyAttribute(key: KeyAttribute): dynamodb.Attribute {
  return { name: key.name, type: ATTRIBUTE_TYPES[key.type] };
}

function indexProps(index: IndexDecl): dynamodb.GlobalSecondaryIndexProps {
  const keys = {
    indexName: index.name,
    partitionKey: keyAttribute(index.partitionKey),
    sortKey: index.sortKey && keyAttribute(index.sortKey),
  };
  switch (index.projection.type) {
    case 'KEYS_ONLY':
      return { ...keys, projectionType: dynamodb.ProjectionType.KEYS_ONLY };
    case 'ALL':
      return { ...keys, projectionType: dynamodb.ProjectionType.ALL };
    case 'INCLUDE':
      return {
        ...keys,
        projectionType: dynamodb.ProjectionType.INCLUDE,
        nonKeyAttributes: [...index.projection.nonKeyAttributes],
      };
  }
}
