import type { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type { SamplingSessionRecord } from '../../domain/records.js';
import { requireSamplingSession } from '../../repositories/sampling-sessions.js';

/**
 * A container's memory of the sampling sessions its submits named. A sampling session record is
 * written once and never changed or deleted (shared/repositories/sampling-sessions.ts), so a record
 * read once answers every later asample on it: an RL batch's calls read it once instead of once per
 * call. What can change is checked elsewhere on every submit, as before: whether its session finished
 * (the submit's transaction) and whether its checkpoint is still readable (C3-C5). Only records found
 * are kept, at most `maxEntries` (the oldest goes first); another tenant's answers as unknown (C6).
 */
export class SamplingSessionCache {
  readonly #records = new Map<string, SamplingSessionRecord>();

  constructor(private readonly maxEntries = 1_000) {}

  async require(
    doc: DynamoDBDocumentClient,
    table: string,
    samplingSessionId: string,
    tenant: string,
  ): Promise<SamplingSessionRecord> {
    const known = this.#records.get(samplingSessionId);
    // Another tenant's id reads the registry as before, which answers it as unknown.
    if (known !== undefined && known.tenant === tenant) return known;
    const record = await requireSamplingSession(doc, table, samplingSessionId, tenant);
    if (this.#records.size >= this.maxEntries) {
      const oldest = this.#records.keys().next();
      if (oldest.done !== true) this.#records.delete(oldest.value);
    }
    this.#records.set(samplingSessionId, record);
    return record;
  }

  get size(): number {
    return this.#records.size;
  }
}

/** This container's cache (a Lambda container serves one request at a time; locally, every api request). */
export const samplingSessions = new SamplingSessionCache();
