import { expect, it } from 'vitest';
import { describeScenario } from './scenario.js';

interface Refusal {
  raised: string;
  status: number | null;
  message: string;
}

/**
 * Refused as an unknown id would be (404, or a failed future), and by a route that exists: a missing
 * endpoint's 404 refuses everyone and proves nothing about isolation.
 */
function expectRefused(refusal: Refusal): void {
  expect(['NotFoundError', 'RequestFailedError']).toContain(refusal.raised);
  expect(refusal.message).not.toMatch(/no route/);
}

describeScenario('isolation', (report) => {
  it("the owner can use its own model's checkpoints (the control)", () => {
    const { state, sampler } = report().observed<{ state: string; sampler: string }>(
      'owner_uses_its_own_checkpoints',
    );
    expect(state).toMatch(/^tinker:\/\//);
    expect(sampler).toMatch(/^tinker:\/\//);
  });

  it("another tenant cannot load_state the owner's checkpoint", () => {
    expectRefused(report().observed('other_cannot_load_the_owners_state'));
  });

  it("another tenant cannot create_training_client_from_state the owner's checkpoint", () => {
    expectRefused(report().observed('other_cannot_create_a_training_client_from_the_owners_state'));
  });

  it("another tenant cannot create a sampling client on the owner's sampler checkpoint", () => {
    expectRefused(report().observed('other_cannot_sample_the_owners_checkpoint'));
  });

  it("another tenant cannot use the owner's model id", () => {
    expectRefused(report().observed('other_cannot_use_the_owners_model'));
  });
});
