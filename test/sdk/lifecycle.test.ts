import { expect, it } from 'vitest';
import {
  ADAPTER_CONFIG_FILE,
  ADAPTER_WEIGHTS_FILE,
  COMPLETE_MARKER_FILE,
} from '../../shared/wire/archive/archive.js';
import { describeScenario } from './scenario.js';

/**
 * C2-C5 through the official SDK's RestClient and CLI against the local stack, two tenants: what
 * `get_checkpoint_archive_url`, `set_checkpoint_ttl`, `publish`/`unpublish_checkpoint`,
 * `delete_checkpoint`, `save_state(ttl_seconds=...)` and `tinker checkpoint download|set-ttl|
 * publish|unpublish|delete` do (scenarios/lifecycle.py).
 */

const FILES = [ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, COMPLETE_MARKER_FILE];

interface Refusal {
  readonly raised: string;
  readonly status: number | null;
  readonly seconds: number;
}

/** A 404 the SDK raises at once (a retried status would take minutes). */
const promptly404 = (refusal: Refusal) => {
  expect(refusal.status).toBe(404);
  expect(refusal.seconds).toBeLessThan(10);
};

describeScenario(
  'lifecycle',
  (report) => {
    it('get_checkpoint_archive_url follows the 302 to a URL that downloads the tar with no credentials', () => {
      const observed = report().observed<{
        names: string[];
        expires_in_seconds: number;
        other_tenant: Refusal;
      }>('archive_url_downloads_with_no_credentials');
      expect(observed.names).toEqual(FILES);
      // From the Expires header: ARCHIVE_URL_SECONDS, 60 (the SDK's own default would be 15 minutes).
      expect(observed.expires_in_seconds).toBeGreaterThan(50);
      expect(observed.expires_in_seconds).toBeLessThanOrEqual(60);
      promptly404(observed.other_tenant);
    });

    it('save_state(ttl_seconds=2) reads as absent once it expires: weights_info, load_state, archive', () => {
      const observed = report().observed<{
        before: number;
        weights_info_after: number;
        load_after: Refusal;
        archive_after: Refusal;
      }>('save_state_with_a_short_ttl_expires_end_to_end');
      expect(observed.before).toBe(200);
      expect(observed.weights_info_after).toBe(404);
      promptly404(observed.load_after);
      promptly404(observed.archive_after);
    });

    it('set_checkpoint_ttl sets, clears and expires; 0 is a 400; another tenant gets a 404', () => {
      const observed = report().observed<{
        after_clear: number;
        after_expiry: number;
        zero: Refusal;
        other_tenant: Refusal;
      }>('set_checkpoint_ttl_sets_and_clears');
      expect(observed.after_clear).toBe(200);
      expect(observed.after_expiry).toBe(404);
      expect(observed.zero.status).toBe(400);
      promptly404(observed.other_tenant);
    });

    it('publish lets the other tenant sample; publishing or unpublishing again answers at once', () => {
      const observed = report().observed<{
        before: Refusal;
        publish_again_seconds: number;
        sampled_tokens: number;
        unpublish_again_seconds: number;
        after: Refusal;
        other_cannot_publish: Refusal;
      }>('publish_lets_the_other_tenant_sample_until_unpublished');
      promptly404(observed.before);
      expect(observed.sampled_tokens).toBe(4);
      expect(observed.publish_again_seconds).toBeLessThan(10);
      expect(observed.unpublish_again_seconds).toBeLessThan(10);
      promptly404(observed.after);
      promptly404(observed.other_cannot_publish);
    });

    it('delete_checkpoint is the owner’s alone and makes the checkpoint unknown', () => {
      const observed = report().observed<{
        other_tenant: Refusal;
        before: number;
        after: number;
        again: Refusal;
      }>('delete_checkpoint_makes_it_unknown');
      promptly404(observed.other_tenant);
      expect(observed.before).toBe(200);
      expect(observed.after).toBe(404);
      promptly404(observed.again);
    });

    it('the CLI downloads and extracts the archive, sets and removes a TTL, publishes, unpublishes, deletes', () => {
      const observed = report().observed<{
        download: { code: number; out: string };
        files: string[];
        set_ttl: { code: number };
        remove_ttl: { code: number };
        publish: { code: number };
        other_reads_published: number;
        unpublish: { code: number };
        other_after_unpublish: number;
        delete: { code: number; out: string };
        after_delete: number;
      }>('cli_download_set_ttl_publish_delete');
      expect(observed.download.code, observed.download.out).toBe(0);
      expect(observed.files).toEqual(FILES);
      expect(observed.set_ttl.code).toBe(0);
      expect(observed.remove_ttl.code).toBe(0);
      expect(observed.publish.code).toBe(0);
      expect(observed.other_reads_published).toBe(200);
      expect(observed.unpublish.code).toBe(0);
      expect(observed.other_after_unpublish).toBe(404);
      expect(observed.delete.code, observed.delete.out).toBe(0);
      expect(observed.after_delete).toBe(404);
    });
  },
  { timeoutMs: 360_000 },
);
