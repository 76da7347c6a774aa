import {
  BatchGetCommand,
  BatchWriteCommand,
  type DynamoDBDocumentClient,
  QueryCommand,
} from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { config } from '../../shared/base/config.js';
import type { ModelRow } from '../../shared/domain/records.js';
import { scanLiveIndex } from '../../shared/repositories/live-index.js';
import { readModels } from '../../shared/repositories/models.js';
import {
  claimSample,
  claimSamples,
  markSampleCancelled,
  readLiveSampleClaims,
  readSampleClaims,
} from '../../shared/repositories/samples/claims.js';
import { loggedClients } from '../support/call-log.js';
import type { TestCloud } from '../support/cloud.js';
import {
  readyModel,
  samplingSession,
  schedulerCloud,
  submitSampleRequest,
  submitStep,
} from '../support/scheduler-harness.js';

/**
 * The adapters against what AWS does and DynamoDB Local does not: partial BatchGetItem answers
 * (UnprocessedKeys) and index pages cut short (LastEvaluatedKey), injected by a client wrapper that
 * still sends every request to the local cloud.
 */
describe('scheduler adapters under partial answers', () => {
  let cloud: TestCloud;
  beforeAll(async () => {
    cloud = await schedulerCloud();
  });

  /** Sends through the real client, after `alter` had its way with the command or the answer. */
  function wrapped(alter: (command: unknown, send: (c: unknown) => Promise<unknown>) => Promise<unknown>) {
    const real = cloud.clients.doc;
    const send = (command: unknown) => real.send(command as never) as Promise<unknown>;
    return { send: (command: unknown) => alter(command, send) } as unknown as DynamoDBDocumentClient;
  }

  it('reads every model although BatchGetItem leaves keys unprocessed, 100 keys a call at most', async () => {
    const table = config().table('models');
    const ids = Array.from({ length: 150 }, (_, index) => `model-partial-${String(index).padStart(3, '0')}`);
    for (let start = 0; start < ids.length; start += 25) {
      const rows = ids.slice(start, start + 25).map(
        (model_id): ModelRow => ({
          model_id,
          tenant: 't',
          session_id: 's',
          base_model: 'b',
          lora_config: { rank: 1 },
          status: 'active',
          epoch: 0,
          planned_through: 0,
          applied_through: 0,
          attempts: 0,
          created_at: 0,
        }),
      );
      await cloud.clients.doc.send(
        new BatchWriteCommand({ RequestItems: { [table]: rows.map((Item) => ({ PutRequest: { Item } })) } }),
      );
    }
    const sizes: number[] = [];
    const consistent: boolean[] = [];
    const flaky = wrapped(async (command, send) => {
      if (!(command instanceof BatchGetCommand)) return send(command);
      const request = command.input.RequestItems![table]!;
      const keys = request.Keys ?? [];
      sizes.push(keys.length);
      consistent.push(request.ConsistentRead === true);
      // Every call with more than one key gets only its first half answered.
      const kept = keys.length > 1 ? keys.slice(0, Math.ceil(keys.length / 2)) : keys;
      const answer = (await send(
        new BatchGetCommand({ RequestItems: { [table]: { ...request, Keys: kept } } }),
      )) as { Responses?: Record<string, unknown[]> };
      const rest = keys.slice(kept.length);
      return { ...answer, UnprocessedKeys: rest.length > 0 ? { [table]: { Keys: rest } } : {} };
    });

    const models = await readModels(flaky, table, [...ids, ids[0]!]);
    expect([...models.keys()].sort()).toEqual(ids);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(100);
    expect(sizes.length).toBeGreaterThan(2);
    expect(consistent.every(Boolean)).toBe(true);
  });

  it('pages every shard of the index through LastEvaluatedKey and keeps only the projection', async () => {
    const m = await readyModel(cloud.clients);
    const submitted = new Set<string>();
    for (let n = 0; n < 7; n++) submitted.add((await submitStep(cloud.clients, m, 'forward')).requestId);
    submitted.add((await submitSampleRequest(cloud.clients, samplingSession())).requestId);

    const short = wrapped(async (command, send) => {
      if (command instanceof QueryCommand) command.input.Limit = 2;
      return send(command);
    });
    const scan = await scanLiveIndex(short, config().table('futures'), config().pool, config().liveShards);
    expect(new Set(scan.rows.map((row) => row.request_id))).toEqual(submitted);
    expect(scan.pages).toBeGreaterThanOrEqual(config().liveShards + 3);
    const allowed = new Set([
      'request_id',
      'model_id',
      'tenant',
      'seq',
      'request_type',
      'checkpoint_id',
      'status',
      'tokens',
    ]);
    for (const row of scan.rows) for (const key of Object.keys(row)) expect(allowed.has(key)).toBe(true);
    expect(scan.rows.find((row) => row.request_type === 'forward')).toMatchObject({
      model_id: m,
      status: 'pending',
    });
    // The tenant is projected for fair dispatch across tenants (shared/domain/planning/planner.ts).
    expect(scan.rows.every((row) => typeof row.tenant === 'string')).toBe(true);
  });

  it('claims a sample once; an expired claim is replaced and no longer counts as claimed', async () => {
    const registry = config().table('registry');
    const now = Date.now();
    const claim = (token: string, at: number) =>
      claimSample(
        cloud.clients.doc,
        registry,
        { request_id: 'req-claimed', claim_token: token, work_item_id: token, lease_until: at + 1_000 },
        at,
      );
    expect(await claim('wi-1', now)).toBe(true);
    expect(await claim('wi-2', now + 500)).toBe(false);
    expect(await readLiveSampleClaims(cloud.clients.doc, registry, ['req-claimed'], now + 500)).toEqual(
      new Set(['req-claimed']),
    );
    expect(await readLiveSampleClaims(cloud.clients.doc, registry, ['req-claimed'], now + 1_000)).toEqual(
      new Set(),
    );
    expect(await claim('wi-3', now + 1_000)).toBe(true);
  });

  it('claims many samples in one transaction; one held by another tick fails only its own claim', async () => {
    const registry = config().table('registry');
    const now = Date.now();
    const wanted = (token: string, ids: readonly string[]) =>
      ids.map((request_id) => ({
        request_id,
        claim_token: token,
        work_item_id: token,
        lease_until: now + 60_000,
      }));
    const ids = Array.from({ length: 5 }, (_, index) => `req-many-${index}`);
    // Another tick holds the third, live; the fourth's claim expired (its worker vanished, a cancel marked it).
    await claimSample(cloud.clients.doc, registry, wanted('wi-other', [ids[2] as string])[0]!, now);
    await claimSample(
      cloud.clients.doc,
      registry,
      { request_id: ids[3] as string, claim_token: 'wi-gone', work_item_id: 'wi-gone', lease_until: now - 1 },
      now - 10_000,
    );
    await markSampleCancelled(cloud.clients.doc, registry, ids[3] as string, now - 5_000);
    expect(await claimSamples(cloud.clients.doc, registry, wanted('wi-many', ids), now)).toEqual([
      true,
      true,
      false,
      true,
      true,
    ]);
    const claims = await readSampleClaims(cloud.clients.doc, registry, ids);
    expect(ids.map((id) => claims.get(id)?.claim_token)).toEqual([
      'wi-many',
      'wi-many',
      'wi-other',
      'wi-many',
      'wi-many',
    ]);
    // Taken over, not replaced: the mark stays and the dispatches count on (E2, W9).
    expect(claims.get(ids[3] as string)).toMatchObject({ claims: 2 });
    expect(claims.get(ids[3] as string)?.cancel_requested).toBeDefined();

    // All free: one TransactWriteItems claims them all, 100 a call.
    const more = Array.from({ length: 120 }, (_, index) => `req-more-${index}`);
    const logged = loggedClients(cloud.endpoints, cloud.prefix);
    const answers = await claimSamples(logged.clients.doc, registry, wanted('wi-more', more), now);
    expect(answers.every(Boolean)).toBe(true);
    expect(logged.log.calls.map((call) => `${call.split(' ')[0]} x${call.split('+').length}`).sort()).toEqual(
      ['TransactWriteItems x100', 'TransactWriteItems x20'],
    );
    logged.clients.dynamo.destroy();
  });
});
