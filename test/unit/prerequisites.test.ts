import { afterEach, describe, expect, it, vi } from 'vitest';
import { missingPrerequisite, runningInCi } from '../support/prerequisites.js';

describe('a missing test prerequisite', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it('skips with its one line on a developer machine', () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
    expect(() => missingPrerequisite('engine tests skipped', {})).not.toThrow();
    expect(warn).toHaveBeenCalledWith('engine tests skipped');
  });

  it('fails with the same reason under CI, which installs it', () => {
    expect(runningInCi({ CI: 'true' })).toBe(true);
    expect(() => missingPrerequisite('engine tests skipped', { CI: 'true' })).toThrow(
      /^engine tests skipped; CI installs this prerequisite/,
    );
  });

  it('counts only CI=true as CI', () => {
    expect(runningInCi({})).toBe(false);
    expect(runningInCi({ CI: 'false' })).toBe(false);
  });
});
