import { expect, it } from 'vitest';
import { describeScenario } from './scenario.js';

/**
 * The listings (C1) and their isolation (C6) through the official SDK's RestClient and CLI, with two
 * tenants (scenarios/listings.py). Other scenarios use the same tenants at the same time, so these
 * checks look at the script's own runs, checkpoints and session within the lists.
 */

interface RunSeen {
  id: string;
  owner: string;
  base_model: string;
  is_lora: boolean;
  lora_rank: number;
  user_metadata: Record<string, string> | null;
  last_request_time_aware: boolean;
  last_checkpoint: string | null;
  last_sampler_checkpoint: string | null;
}

/** Pages of 2 read the same list one page of 1000 reads, with the same total in every cursor. */
interface Paging {
  paged_equals_whole: boolean;
  totals_equal_length: boolean;
  pages: number;
}

function expectWholePaging(paging: Paging): void {
  expect(paging.paged_equals_whole).toBe(true);
  expect(paging.totals_equal_length).toBe(true);
  // At least our own two runs or four checkpoints: more than one page of 2.
  expect(paging.pages).toBeGreaterThanOrEqual(2);
}

describeScenario(
  'listings',
  (report) => {
    it("list_training_runs pages through the owner's runs only, newest first, each a full TrainingRun", () => {
      const seen = report().observed<
        Paging & {
          owners: string[];
          mine: RunSeen[];
          expected: string[];
          paths: string[];
        }
      >('list_training_runs_pages_through_the_owners_runs');
      expectWholePaging(seen);
      expect(seen.owners).toEqual(['sdk-owner']);
      expect(seen.mine.map((run) => run.id)).toEqual(seen.expected);
      const first = seen.mine[1] as RunSeen;
      expect(first).toEqual({
        id: seen.expected[1],
        owner: 'sdk-owner',
        base_model: 'reference/byte-lm',
        is_lora: true,
        lora_rank: 4,
        user_metadata: { purpose: 'listings', step: '3' },
        last_request_time_aware: true,
        last_checkpoint: seen.paths[2],
        last_sampler_checkpoint: seen.paths[1],
      });
      expect(seen.mine[0]).toMatchObject({
        lora_rank: 2,
        user_metadata: null,
        last_sampler_checkpoint: null,
      });
    });

    it("get_training_run answers the owner; the other tenant's NotFoundError reads as for an unknown run", () => {
      const seen = report().observed<{
        run: RunSeen;
        refused: { raised: string; message: string } | null;
        unknown: { raised: string; message: string } | null;
        run_id: string;
      }>('get_training_run_answers_the_owner_and_404s_the_other_tenant');
      expect(seen.run).toMatchObject({ id: seen.run_id, owner: 'sdk-owner', lora_rank: 4 });
      expect(seen.refused?.raised).toBe('NotFoundError');
      expect(seen.refused?.message.replace(seen.run_id, 'model-nobody')).toBe(seen.unknown?.message);
    });

    it('list_checkpoints gives the run’s checkpoints newest first, SDK ids and aware times, no cursor', () => {
      const seen = report().observed<{
        cursor: unknown;
        checkpoints: {
          checkpoint_id: string;
          checkpoint_type: string;
          tinker_path: string;
          time_aware: boolean;
        }[];
        times_newest_first: boolean;
        paths: string[];
      }>('list_checkpoints_of_a_run_newest_first_without_a_cursor');
      expect(seen.cursor).toBeNull();
      expect(seen.times_newest_first).toBe(true);
      expect(seen.checkpoints).toEqual(
        [...seen.paths].reverse().map((path) => {
          const id = path.split('/').slice(-2).join('/');
          return {
            checkpoint_id: id,
            checkpoint_type: id.startsWith('weights/') ? 'training' : 'sampler',
            tinker_path: path,
            time_aware: true,
            public: false,
            expires_at: null,
          };
        }),
      );
    });

    it('list_user_checkpoints pages as the CLI does, newest first; the other tenant sees none of them', () => {
      const seen = report().observed<
        Paging & {
          mine_in_order: string[];
          expected: string[];
          newest_first: boolean;
          other_sees_ours: string[];
        }
      >('list_user_checkpoints_pages_as_the_cli_does');
      expectWholePaging(seen);
      expect(seen.mine_in_order).toEqual(seen.expected);
      expect(seen.newest_first).toBe(true);
      expect(seen.other_sees_ours).toEqual([]);
    });

    it("list_sessions and get_session: the session's runs and samplers, to its owner only", () => {
      const seen = report().observed<{
        listed: boolean;
        other_lists_it: boolean;
        training_run_ids: string[];
        sampler_ids: string[];
        expected_runs: string[];
        expected_sampler: string;
        refused: string | null;
      }>('list_sessions_and_get_session');
      expect(seen.listed).toBe(true);
      expect(seen.other_lists_it).toBe(false);
      expect(seen.training_run_ids).toEqual(seen.expected_runs);
      expect(seen.sampler_ids).toEqual([seen.expected_sampler]);
      expect(seen.refused).toBe('NotFoundError');
    });

    it('the CLI’s run list and checkpoint list [--run-id] parse our answers, in JSON and as tables', () => {
      const seen = report().observed<{
        run_ids: string[];
        other_run_ids: string[];
        of_run: string[];
        all_paths: string[];
        tables: Record<string, { code: number; stderr: string }>;
        ids: { first: string; second: string; paths: string[]; second_path: string };
      }>('cli_run_list_and_checkpoint_list');
      const { ids } = seen;
      expect(seen.run_ids.filter((id) => id === ids.first || id === ids.second)).toEqual([
        ids.second,
        ids.first,
      ]);
      expect(seen.other_run_ids).not.toContain(ids.first);
      expect(seen.of_run).toEqual([...ids.paths].reverse());
      const ours = new Set([...ids.paths, ids.second_path]);
      expect(seen.all_paths.filter((path) => ours.has(path))).toEqual([
        ids.second_path,
        ...[...ids.paths].reverse(),
      ]);
      for (const [name, table] of Object.entries(seen.tables)) expect(table, name).toMatchObject({ code: 0 });
    });
  },
  // Dozens of CLI processes (each starts Python and imports the SDK): about 130 s on a busy 2-core machine.
  { timeoutMs: 300_000 },
);
