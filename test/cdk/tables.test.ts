import { Match } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { withoutIndexes } from '../../cdk/staging.js';
import {
  BY_OWNER_INDEX,
  BY_PARENT_INDEX,
  BY_TENANT_INDEX,
  LISTING_PROJECTION,
  LIVE_BY_MODEL_INDEX,
  LIVE_INDEX,
  LIVE_PROJECTION,
  physicalName,
  TABLE_IDS,
  topology,
} from '../../shared/base/topology.js';
import { logicalIdWhere, properties, synth, TEST_PREFIX } from '../support/cdk/synth.js';

const { template } = synth();

function tableProps(tableId: (typeof TABLE_IDS)[number]): Record<string, unknown> {
  const name = physicalName(TEST_PREFIX, topology.tables[tableId].name);
  return properties(template, logicalIdWhere(template, 'AWS::DynamoDB::Table', 'TableName', name));
}

describe('tables', () => {
  it('builds exactly one table per declaration, named by physicalName', () => {
    template.resourceCountIs('AWS::DynamoDB::Table', TABLE_IDS.length);
    for (const tableId of TABLE_IDS) expect(tableProps(tableId)).toBeDefined();
  });

  it('projects exactly the planning attributes into the live index (R6)', () => {
    const futures = tableProps('futures');
    const indexes = futures.GlobalSecondaryIndexes as Array<Record<string, unknown>>;
    expect(indexes.map((index) => index.IndexName)).toEqual([LIVE_INDEX, LIVE_BY_MODEL_INDEX]);
    const live = indexes[0]!;
    expect(live.IndexName).toBe(LIVE_INDEX);
    expect(live.KeySchema).toEqual([
      { AttributeName: 'live', KeyType: 'HASH' },
      { AttributeName: 'request_id', KeyType: 'RANGE' },
    ]);
    const projection = live.Projection as { ProjectionType: string; NonKeyAttributes: string[] };
    expect(projection.ProjectionType).toBe('INCLUDE');
    expect([...projection.NonKeyAttributes].sort()).toEqual([...LIVE_PROJECTION].sort());
    // Payloads, results and errors stay out of the index: planning never reads them.
    for (const heavy of ['payload_key', 'result', 'result_key', 'error']) {
      expect(projection.NonKeyAttributes).not.toContain(heavy);
    }
  });

  it('builds the sparse listing indexes (C1): by_owner and by_parent on the registry, by_tenant on models', () => {
    const registry = tableProps('registry').GlobalSecondaryIndexes as Array<Record<string, unknown>>;
    expect(registry.map((index) => index.IndexName)).toEqual([BY_OWNER_INDEX, BY_PARENT_INDEX]);
    for (const [index, partition] of [
      [registry[0]!, 'owner_key'],
      [registry[1]!, 'parent_key'],
    ] as const) {
      expect(index.KeySchema).toEqual([
        { AttributeName: partition, KeyType: 'HASH' },
        { AttributeName: 'list_sort', KeyType: 'RANGE' },
      ]);
      const projection = index.Projection as { ProjectionType: string; NonKeyAttributes: string[] };
      expect(projection.ProjectionType).toBe('INCLUDE');
      expect([...projection.NonKeyAttributes].sort()).toEqual([...LISTING_PROJECTION].sort());
      // Blob keys and request ids stay out: a listing row never needs them.
      for (const heavy of ['blob_key', 'request_id', 'path', 'user_metadata']) {
        expect(projection.NonKeyAttributes).not.toContain(heavy);
      }
    }
    const models = tableProps('models');
    expect(models.GlobalSecondaryIndexes).toEqual([
      {
        IndexName: BY_TENANT_INDEX,
        KeySchema: [
          { AttributeName: 'tenant', KeyType: 'HASH' },
          { AttributeName: 'created_at', KeyType: 'RANGE' },
        ],
        Projection: { ProjectionType: 'KEYS_ONLY' },
      },
    ]);
    expect(models.AttributeDefinitions).toContainEqual({ AttributeName: 'created_at', AttributeType: 'N' });
  });

  it('stages indexes with omitIndexes: the stack then has one new index per table, and a typo is refused', () => {
    const staged = synth({ topology: withoutIndexes(topology, [BY_PARENT_INDEX]) }).template;
    const name = physicalName(TEST_PREFIX, topology.tables.registry.name);
    const registry = properties(staged, logicalIdWhere(staged, 'AWS::DynamoDB::Table', 'TableName', name));
    expect((registry.GlobalSecondaryIndexes as Array<{ IndexName: string }>).map((i) => i.IndexName)).toEqual(
      [BY_OWNER_INDEX],
    );
    expect(() => withoutIndexes(topology, ['by_parnet'])).toThrow(/by_parnet/);
  });

  it('keys live_by_model by model and sorts it by live, so only pending rows are in it (R5)', () => {
    const indexes = tableProps('futures').GlobalSecondaryIndexes as Array<Record<string, unknown>>;
    const byModel = indexes.find((index) => index.IndexName === LIVE_BY_MODEL_INDEX)!;
    expect(byModel.KeySchema).toEqual([
      { AttributeName: 'model_id', KeyType: 'HASH' },
      { AttributeName: 'live', KeyType: 'RANGE' },
    ]);
    const projection = byModel.Projection as { ProjectionType: string; NonKeyAttributes: string[] };
    expect(projection.ProjectionType).toBe('INCLUDE');
    // The live index's attributes, less model_id (a key here, projected anyway).
    expect([...projection.NonKeyAttributes, 'model_id'].sort()).toEqual([...LIVE_PROJECTION].sort());
  });

  it('gives every table the stream view, TTL and keys its declaration names', () => {
    for (const tableId of TABLE_IDS) {
      const decl = topology.tables[tableId];
      const props = tableProps(tableId);
      expect(props.KeySchema).toEqual([
        { AttributeName: decl.partitionKey.name, KeyType: 'HASH' },
        ...(decl.sortKey ? [{ AttributeName: decl.sortKey.name, KeyType: 'RANGE' }] : []),
      ]);
      expect(props.StreamSpecification).toEqual(decl.stream ? { StreamViewType: decl.stream } : undefined);
      expect(props.TimeToLiveSpecification).toEqual(
        decl.timeToLiveAttribute ? { AttributeName: decl.timeToLiveAttribute, Enabled: true } : undefined,
      );
    }
    // The two streams the scheduler reads, spelled out: the models filter compares old and new images.
    expect(tableProps('futures').StreamSpecification).toEqual({ StreamViewType: 'NEW_IMAGE' });
    expect(tableProps('models').StreamSpecification).toEqual({ StreamViewType: 'NEW_AND_OLD_IMAGES' });
  });

  it('bills on demand, encrypts, keeps point-in-time recovery and is retained by default', () => {
    template.allResources('AWS::DynamoDB::Table', {
      Properties: Match.objectLike({
        BillingMode: 'PAY_PER_REQUEST',
        SSESpecification: { SSEEnabled: true },
        PointInTimeRecoverySpecification: { PointInTimeRecoveryEnabled: true },
      }),
      DeletionPolicy: 'Retain',
      UpdateReplacePolicy: 'Retain',
    });
  });
});
