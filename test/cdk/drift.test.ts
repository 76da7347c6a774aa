import type { CreateTableCommandInput } from '@aws-sdk/client-dynamodb';
import type { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { createTableInputs, resourceNames } from '../../local/cloud/resources.js';
import { physicalName, TABLE_IDS, type Topology, topology } from '../../shared/base/topology.js';
import { editableTopology } from '../support/cdk/editable-topology.js';
import { functionLogicalId, logicalIdWhere, properties, synth, TEST_PREFIX } from '../support/cdk/synth.js';

/** The parts of a table that the stack and the local cloud must agree on, in one comparable shape. */
function shapeOfInput(input: CreateTableCommandInput) {
  return {
    name: input.TableName,
    keys: input.KeySchema,
    attributes: [...(input.AttributeDefinitions ?? [])].sort((a, b) =>
      String(a.AttributeName).localeCompare(String(b.AttributeName)),
    ),
    indexes: (input.GlobalSecondaryIndexes ?? []).map((index) => ({
      name: index.IndexName,
      keys: index.KeySchema,
      projection: index.Projection?.ProjectionType,
      include: [...(index.Projection?.NonKeyAttributes ?? [])].sort(),
    })),
    stream: input.StreamSpecification?.StreamViewType,
    billing: input.BillingMode,
  };
}

type CfnTable = {
  TableName: string;
  KeySchema: unknown;
  AttributeDefinitions: { AttributeName: string }[];
  GlobalSecondaryIndexes?: {
    IndexName: string;
    KeySchema: unknown;
    Projection: { ProjectionType: string; NonKeyAttributes?: string[] };
  }[];
  StreamSpecification?: { StreamViewType: string };
  BillingMode: string;
};

function shapeOfDeployed(template: Template, tableName: string) {
  const table = properties(
    template,
    logicalIdWhere(template, 'AWS::DynamoDB::Table', 'TableName', tableName),
  );
  const cfn = table as unknown as CfnTable;
  return {
    name: cfn.TableName,
    keys: cfn.KeySchema,
    attributes: [...cfn.AttributeDefinitions].sort((a, b) => a.AttributeName.localeCompare(b.AttributeName)),
    indexes: (cfn.GlobalSecondaryIndexes ?? []).map((index) => ({
      name: index.IndexName,
      keys: index.KeySchema,
      projection: index.Projection.ProjectionType,
      include: [...(index.Projection.NonKeyAttributes ?? [])].sort(),
    })),
    stream: cfn.StreamSpecification?.StreamViewType,
    billing: cfn.BillingMode,
  };
}

function expectSameTables(declared: Topology, template: Template): void {
  const local = createTableInputs(declared, TEST_PREFIX);
  expect(local).toHaveLength(TABLE_IDS.length);
  for (const input of local) {
    expect(shapeOfDeployed(template, String(input.TableName))).toEqual(shapeOfInput(input));
  }
}

describe('one declaration, two clouds', () => {
  it('builds the same tables on AWS as the local cloud does', () => {
    expectSameTables(topology, synth().template);
  });

  it('builds the same queues on AWS as the local cloud does, the stream DLQ among them', () => {
    const template = synth().template;
    const deployed = Object.values(template.findResources('AWS::SQS::Queue')).map(
      (queue) => (queue.Properties as { QueueName: string }).QueueName,
    );
    const local = Object.values(resourceNames(topology, TEST_PREFIX).queues);
    expect(deployed.sort()).toEqual([...local].sort());
    expect(local).toContain(physicalName(TEST_PREFIX, 'stream-dlq'));
  });

  it('follows a renamed table in the stack and in the local cloud alike', () => {
    const renamed = editableTopology();
    renamed.tables.futures.name = 'futures-v2';
    const { stack, template } = synth({ topology: renamed });

    const newName = physicalName(TEST_PREFIX, 'futures-v2');
    const tableNames = Object.values(template.findResources('AWS::DynamoDB::Table')).map(
      (table) => (table.Properties as { TableName: string }).TableName,
    );
    expect(tableNames).toContain(newName);
    expect(tableNames).not.toContain(physicalName(TEST_PREFIX, 'futures'));

    // The functions and the outputs point at the renamed table.
    const tableRef = { Ref: logicalIdWhere(template, 'AWS::DynamoDB::Table', 'TableName', newName) };
    for (const functionId of ['api', 'scheduler', 'worker', 'sweeper'] as const) {
      const env = (
        properties(template, functionLogicalId(stack, functionId)).Environment as {
          Variables: Record<string, unknown>;
        }
      ).Variables;
      expect(env[topology.tables.futures.envVar]).toEqual(tableRef);
    }
    template.hasOutput('FuturesTableName', { Value: tableRef });

    const localNames = createTableInputs(renamed, TEST_PREFIX).map((input) => input.TableName);
    expect(localNames).toContain(newName);
    expect(localNames).not.toContain(physicalName(TEST_PREFIX, 'futures'));
    expectSameTables(renamed, template);
  });

  it('follows a change to the live projection in both', () => {
    const wider = editableTopology();
    const live = wider.tables.futures.indexes[0]!;
    if (live.projection.type !== 'INCLUDE') throw new Error('live index projects INCLUDE');
    live.projection.nonKeyAttributes = [...live.projection.nonKeyAttributes, 'tenant'];
    expectSameTables(wider, synth({ topology: wider }).template);
  });
});
