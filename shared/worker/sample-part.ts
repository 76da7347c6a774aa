import { DeleteCommand } from '@aws-sdk/lib-dynamodb';
import type { SampleRequest } from '../backend/backend.js';
import { config } from '../config.js';
import { registryKey } from '../domain/records.js';
import { isAwsError, StepUserError } from '../errors.js';
import { logger } from '../logger.js';
import type { WorkItemSample } from '../scheduling/work-item.js';
import { commitSample, readSampleClaim } from './commit.js';
import { AbandonedError, type RunContext, stopIfAborted } from './context.js';
import { storeOutcome } from './outputs.js';
import { sampleResult } from './results.js';
import { MalformedPayloadError, parseSamplePayload } from './step-payloads.js';
import type { StepResult } from './steps.js';
import type { PartOutcome, SampleOutcome } from './types.js';

/**
 * One sample request (R4): it holds a per-request claim (`claim#<request_id>` with `claim_token`), so
 * it runs only while that claim is this work item's, loads the sampler checkpoint (or the base model),
 * samples with the seed the API stored in the payload (P6), and commits its future and the deletion of
 * its claim in one transaction.
 */
export async function runSamplePart(sample: WorkItemSample, ctx: RunContext): Promise<SampleOutcome> {
  const outcome = await runSample(sample, ctx).catch(async (error: unknown): Promise<PartOutcome> => {
    if (error instanceof AbandonedError || ctx.signal?.aborted) return { outcome: 'abandoned' };
    const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    logger.error('sample failed; releasing its claim', { request_id: sample.request_id, error: message });
    const released = await releaseClaim(ctx, sample).catch(() => false);
    return { outcome: 'failed', error: message, released };
  });
  return { request_id: sample.request_id, ...outcome };
}

async function runSample(sample: WorkItemSample, ctx: RunContext): Promise<PartOutcome> {
  const claim = await readSampleClaim(ctx.clients.doc, sample.request_id);
  if (claim?.claim_token !== sample.claim_token) return { outcome: 'not_inflight' };
  stopIfAborted(ctx.signal);
  const result = await execute(sample, ctx);
  await ctx.emit({ kind: 'sample-done', request_id: sample.request_id });
  stopIfAborted(ctx.signal);
  const placement = { inlineMaxBytes: ctx.inlineResultMaxBytes, budget: ctx.inlineResultMaxBytes };
  const stored = await storeOutcome(sample.request_id, result, placement, ctx.clients.s3);
  stopIfAborted(ctx.signal);
  const committed = await commitSample(
    sample.request_id,
    sample.claim_token,
    stored,
    ctx.now(),
    ctx.clients.doc,
  );
  return committed.committed
    ? { outcome: 'committed', settled_by_reread: committed.settledByReread }
    : { outcome: 'lost' };
}

async function execute(sample: WorkItemSample, ctx: RunContext): Promise<StepResult> {
  try {
    const payload = parseSamplePayload(sample.request_id, sample.payload);
    const sampler = await ctx.samplers.get(payload.base_model, payload.checkpoint);
    const request = {
      num_samples: payload.num_samples,
      prompt: payload.prompt,
      sampling_params: payload.sampling_params,
      prompt_logprobs: payload.prompt_logprobs ?? false,
      topk_prompt_logprobs: payload.topk_prompt_logprobs ?? 0,
    } as SampleRequest;
    return { status: 'completed', result: sampleResult(await ctx.backend.sample(sampler, request)) };
  } catch (error) {
    if (error instanceof StepUserError)
      return { status: 'failed', error: { message: error.message, category: 'user' } };
    if (error instanceof MalformedPayloadError) {
      return { status: 'failed', error: { message: error.message, category: 'server' } };
    }
    throw error;
  }
}

/** Gives the sample back to the scheduler at once after an infrastructure error. */
async function releaseClaim(ctx: RunContext, sample: WorkItemSample): Promise<boolean> {
  try {
    await ctx.clients.doc.send(
      new DeleteCommand({
        TableName: config().table('registry'),
        Key: { pk: registryKey.sampleClaim(sample.request_id) },
        ConditionExpression: 'claim_token = :token',
        ExpressionAttributeValues: { ':token': sample.claim_token },
      }),
    );
    return true;
  } catch (error) {
    if (isAwsError(error, 'ConditionalCheckFailedException')) return false;
    throw error;
  }
}
