import { beforeAll, describe, expect, it } from 'vitest';
import { config } from '../../shared/base/config.js';
import { inflightToken } from '../../shared/domain/planning/claim.js';
import type { WorkItem } from '../../shared/domain/planning/work-item.js';
import { MULTIPART_PART_BYTES, writeWorkItem } from '../../shared/services/scheduler/dispatch.js';
import type { TestCloud } from '../support/cloud.js';
import { readWorkItem, schedulerCloud, stepPayload } from '../support/scheduler-harness.js';

describe('work item writer', () => {
  let cloud: TestCloud;
  beforeAll(async () => {
    cloud = await schedulerCloud();
  });

  const item = (id: string, steps: number, size: number): WorkItem => ({
    work_item_id: id,
    pool: 'default',
    created_at: Date.now(),
    models: [
      {
        model_id: 'model-w',
        tenant: 't',
        epoch: 3,
        inflight: inflightToken('model-w', 3),
        base_applied_through: 4,
        base_state_ref: 'state/model-w/2.bin',
        steps: Array.from({ length: steps }, (_, index) => ({
          request_id: `r${index}`,
          seq: 5 + index,
          request_type: 'forward_backward' as const,
          payload: stepPayload('forward_backward', index + 1, size),
        })),
      },
    ],
    samples: [],
  });

  it('writes a small work item in one PUT and reads back exactly what was written', async () => {
    const small = item('wi-small', 3, 2);
    const bytes = await writeWorkItem(cloud.clients.s3, config().bucket, small);
    expect(bytes).toBeLessThan(MULTIPART_PART_BYTES);
    expect(await readWorkItem(cloud.clients, 'wi-small')).toEqual(small);
  });

  it('writes a work item larger than a request body in parts, whole', async () => {
    // ~20 MB: 256 passes of ~76 KiB, more than fauxqs (11 MiB) takes in one request.
    const large = item('wi-large', 256, 3000);
    const bytes = await writeWorkItem(cloud.clients.s3, config().bucket, large);
    expect(bytes).toBeGreaterThan(2 * MULTIPART_PART_BYTES);
    expect(await readWorkItem(cloud.clients, 'wi-large')).toEqual(large);
  });

  it('refuses a malformed work item before writing anything', async () => {
    const gapped = item('wi-gapped', 3, 1);
    const steps = gapped.models[0]!.steps;
    await expect(
      writeWorkItem(cloud.clients.s3, config().bucket, {
        ...gapped,
        models: [{ ...gapped.models[0]!, steps: [steps[0]!, steps[2]!] }],
      }),
    ).rejects.toThrow(/contiguous/);
    await expect(readWorkItem(cloud.clients, 'wi-gapped')).rejects.toThrow();
  });
});
