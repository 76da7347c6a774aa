import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { config } from '../../shared/base/config.js';
import type { FunctionId } from '../../shared/base/topology.js';
import { setupTestCloud, type TestCloud } from '../support/cloud.js';
import { type ProbeRuntime, startProbeRuntime } from '../support/probe-runtime.js';

/**
 * Each handler the local runtime runs sees only the resource variables its deployed function gets
 * (the CDK binds a resource's variable where it grants the function that resource), although the
 * runtime writes one environment for all of them into process.env. Every function runs the same
 * probe, with the real topology's grants, fired through its schedule.
 */
describe('local runtime: each function sees its own environment', () => {
  let cloud: TestCloud;
  let probes: ProbeRuntime;
  const runAs = (functionId: FunctionId, read: () => unknown) => probes.runAs(functionId, read);

  beforeAll(async () => {
    cloud = await setupTestCloud();
    probes = await startProbeRuntime(cloud);
  });
  afterAll(async () => {
    await probes?.stop();
  });

  it('fails a read of the prefixes table in the scheduler, which is not granted it, naming the variable', async () => {
    const outcome = await runAs('scheduler', () => config().table('prefixes'));
    expect(outcome).toMatchObject({ name: 'ConfigError' });
    expect((outcome as { message: string }).message).toContain('PREFIXES_TABLE');
    expect(probes.warnings).toHaveBeenCalledWith(
      'local runtime: a function read a resource variable its deployed function does not get',
      { function: 'scheduler', variable: 'PREFIXES_TABLE' },
    );
    // Its granted resources and the settings are there.
    expect(await runAs('scheduler', () => [config().table('futures'), config().pool])).toEqual({
      value: [cloud.names.tables.futures, 'default'],
    });
  });

  it('gives the worker, granted the prefixes table, its name', async () => {
    expect(await runAs('worker', () => config().table('prefixes'))).toEqual({
      value: cloud.names.tables.prefixes,
    });
  });

  it('hides the dead-letter queues from every function but the api, which shows their depths', async () => {
    expect(await runAs('api', () => config().queueUrl('workDlq'))).toEqual({
      value: cloud.names.queueUrls.workDlq,
    });
    const outcome = await runAs('sweeper', () => config().queueUrl('workDlq'));
    expect((outcome as { message: string }).message).toContain('WORK_DLQ_URL');
  });

  it('shows every variable outside any function, as to the runtime and test set-up', () => {
    expect(config().table('prefixes')).toBe(cloud.names.tables.prefixes);
    expect(config().queueUrl('streamDlq')).toBe(cloud.names.queueUrls.streamDlq);
  });
});
