import { describe, expect, it } from 'vitest';
import { grantedEnvVars, resourceEnvVars } from '../../shared/base/grants.js';
import { type FunctionGrants, type Topology, topology } from '../../shared/base/topology.js';

/**
 * Which resource variables a function gets from its grants: the one rule the CDK binds and the local
 * runtime's environment scope applies. The expected lists are written out, not derived.
 */

const TABLES = ['FUTURES_TABLE', 'MODELS_TABLE', 'REGISTRY_TABLE'];

const LANES = [0, 1, 2, 3, 4, 5, 6, 7].map((lane) => `WORK_LANE_${lane}_QUEUE_URL`);

describe('grantedEnvVars', () => {
  it('gives each function of the topology exactly the variables of the resources it is granted', () => {
    const of = (id: keyof Topology['functions']) => grantedEnvVars(topology, topology.functions[id].grants);
    expect(of('api')).toEqual([...TABLES, 'DATA_BUCKET', 'WORK_QUEUE_URL', 'WORK_DLQ_URL', 'STREAM_DLQ_URL']);
    // The scheduler never touches the prefixes table, so it never learns its name.
    // Both send or consume on the work lanes (S2).
    expect(of('scheduler')).toEqual([...TABLES, 'DATA_BUCKET', 'WORK_QUEUE_URL', ...LANES]);
    expect(of('worker')).toEqual([...TABLES, 'PREFIXES_TABLE', 'DATA_BUCKET', 'WORK_QUEUE_URL', ...LANES]);
    // Nor does the sweeper: prefix rows expire by TTL. Its safety tick sends to the lanes as a tick does.
    expect(of('sweeper')).toEqual([...TABLES, 'DATA_BUCKET', 'WORK_QUEUE_URL', ...LANES]);
  });

  it('counts any action, but not an empty grant, and nothing for a queue that declares no variable', () => {
    const resources: Pick<Topology, 'tables' | 'bucket' | 'queues'> = {
      ...topology,
      queues: { ...topology.queues, workDlq: { ...topology.queues.workDlq, envVar: undefined } },
    };
    const grants: FunctionGrants = {
      tables: { futures: ['query-index'], models: [] },
      bucket: [{ prefix: '', actions: ['list'] }],
      queues: { work: ['depth'], workDlq: ['depth'], streamDlq: [] },
    };
    expect(grantedEnvVars(resources, grants)).toEqual(['FUTURES_TABLE', 'DATA_BUCKET', 'WORK_QUEUE_URL']);
    expect(grantedEnvVars(resources, { tables: {}, bucket: [], queues: {} })).toEqual([]);
  });
});

describe('resourceEnvVars', () => {
  it('lists every resource variable the topology declares', () => {
    expect(resourceEnvVars(topology)).toEqual([
      ...TABLES,
      'PREFIXES_TABLE',
      'DATA_BUCKET',
      'WORK_QUEUE_URL',
      'WORK_DLQ_URL',
      'STREAM_DLQ_URL',
      ...LANES,
    ]);
  });
});
