import { GetCommand, QueryCommand } from '@aws-sdk/lib-dynamodb';
import type { AwsClients } from '../../shared/aws/clients.js';
import { liveKey } from '../../shared/base/ids.js';
import { LIVE_INDEX } from '../../shared/base/topology.js';
import { type LiveRow, type ModelRow, registryKey } from '../../shared/domain/records.js';
import { tickLockKey } from '../../shared/services/scheduler/tick-lock.js';

/**
 * What holds the pending requests when the run stops making progress: per model, its pending seqs
 * and its row (in flight? lease? attempts?), pending samples, and the pool's tick lock. Printed with
 * the progress lines, so a stuck run says why.
 */
export async function describePending(input: {
  readonly admin: AwsClients;
  readonly tables: { readonly futures: string; readonly models: string; readonly registry: string };
  readonly pool: string;
  readonly shards: number;
  readonly now: number;
}): Promise<string[]> {
  const { admin, tables } = input;
  const rows: LiveRow[] = [];
  for (let shard = 0; shard < input.shards; shard++) {
    let start: Record<string, unknown> | undefined;
    do {
      const page = await admin.doc.send(
        new QueryCommand({
          TableName: tables.futures,
          IndexName: LIVE_INDEX,
          KeyConditionExpression: 'live = :live',
          ExpressionAttributeValues: { ':live': liveKey(input.pool, shard) },
          ExclusiveStartKey: start,
        }),
      );
      rows.push(...((page.Items ?? []) as LiveRow[]));
      start = page.LastEvaluatedKey;
    } while (start !== undefined);
  }
  const get = async <T>(table: string, key: Record<string, string>) =>
    (await admin.doc.send(new GetCommand({ TableName: table, Key: key, ConsistentRead: true }))).Item as
      | T
      | undefined;
  const lines: string[] = [];
  const lock = await get<{ holder?: string; lease_until?: number; again?: boolean }>(tables.registry, {
    pk: tickLockKey(input.pool),
  });
  if (lock !== undefined) {
    lines.push(`tick lock held, lease ends in ${((lock.lease_until ?? 0) - input.now) / 1000} s`);
  }
  const byModel = new Map<string, LiveRow[]>();
  for (const row of rows) {
    const list = byModel.get(row.model_id) ?? [];
    list.push(row);
    byModel.set(row.model_id, list);
  }
  for (const [modelId, list] of byModel) {
    const training = list.filter((row) => row.request_type !== 'sample');
    const samples = list.length - training.length;
    if (training.length === 0) {
      const claims = await Promise.all(
        list.map((row) =>
          get<{ lease_until?: number }>(tables.registry, { pk: registryKey.sampleClaim(row.request_id) }),
        ),
      );
      const held = claims.filter(
        (claim) => claim !== undefined && (claim.lease_until ?? 0) > input.now,
      ).length;
      lines.push(`${modelId}: ${samples} samples pending (${held} claimed)`);
      continue;
    }
    const model = await get<ModelRow>(tables.models, { model_id: modelId });
    const seqs = training.map((row) => row.seq ?? 0).sort((a, b) => a - b);
    const lease = model?.lease_until === undefined ? '-' : `${(model.lease_until - input.now) / 1000} s`;
    lines.push(
      `${modelId}: seqs ${seqs[0]}..${seqs.at(-1)} (${seqs.length}) pending` +
        `${samples > 0 ? `, ${samples} samples` : ''}; row epoch ${model?.epoch} planned ${model?.planned_through} ` +
        `applied ${model?.applied_through} attempts ${model?.attempts} inflight ${model?.inflight ?? '-'} lease ${lease}`,
    );
  }
  return lines;
}
