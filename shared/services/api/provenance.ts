import type { ForwardBackwardInput, ProvenanceSpan } from '../../backend/pass-input.js';
import { inputTokenCount } from '../../backend/pass-input.js';
import { invalidField as invalid, NotFoundError } from '../../base/errors.js';
import type { SampleSequencesRecord } from '../../domain/records.js';
import { parseSampleSequenceId, sampleSequenceId } from '../../domain/sample-sequences.js';
import { readSampleSequences } from '../../repositories/samples/sequences.js';
import type { OperationContext } from './operation-context.js';
import { parseRequest } from './request-checks.js';
import { getSampleSequenceParams } from './schemas.js';

/**
 * Provenance spans (W8): a datum's `model_input_spans` / `loss_fn_input_spans` must tile the datum's
 * positions and name only sampled sequences this tenant was issued, each span inside that sequence's
 * prompt or its max_tokens. Checked before anything is stored (a 400 naming the span's field); the
 * spans are then stored with the request (its canonical protobuf payload). What produced a span's
 * tokens is answered by `GET /api/v1/sample_sequences/{sequence_id}`.
 */
interface SpanRef {
  readonly field: string;
  readonly span: ProvenanceSpan;
  readonly requestId: string;
  readonly index: number;
}

const notIssued = (field: string) =>
  invalid(`${field}.sequence_id`, 'names no sampled sequence issued to this tenant');

/** The spans of every datum, each run of them tiling its datum's positions; pure. */
export function collectSpans(input: ForwardBackwardInput, field: string): SpanRef[] {
  const refs: SpanRef[] = [];
  const prefix = field === '' ? '' : `${field}.`;
  input.data.forEach((datum, d) => {
    const positions = inputTokenCount(datum.model_input);
    for (const name of ['model_input_spans', 'loss_fn_input_spans'] as const) {
      const spans = datum[name];
      if (spans === undefined || spans.length === 0) continue;
      const listField = `${prefix}data.${d}.${name}`;
      let covered = 0;
      spans.forEach((span, s) => {
        const spanField = `${listField}.${s}`;
        covered += span.length;
        const parsed = parseSampleSequenceId(span.sequence_id);
        if (parsed === undefined) throw notIssued(spanField);
        refs.push({ field: spanField, span, requestId: parsed.requestId, index: parsed.index });
      });
      if (covered !== positions) {
        throw invalid(listField, `spans cover ${covered} positions; they must tile the datum's ${positions}`);
      }
    }
  });
  return refs;
}

/** Each span against the record of its sample (absent: not this tenant's); pure. */
export function checkSpanSources(
  refs: readonly SpanRef[],
  records: ReadonlyMap<string, SampleSequencesRecord>,
): void {
  for (const { field, span, requestId, index } of refs) {
    const record = records.get(requestId);
    if (record === undefined || index >= record.num_samples) throw notIssued(field);
    const room = span.type === 'prompt_tokens' ? record.prompt_tokens : record.max_tokens;
    if (span.offset + span.length > room) {
      const what = span.type === 'prompt_tokens' ? 'prompt tokens' : 'max_tokens';
      throw invalid(
        `${field}.length`,
        `offset ${span.offset} + length ${span.length} runs past the sequence's ${room} ${what}`,
      );
    }
  }
}

export async function checkProvenance(
  ctx: OperationContext,
  input: ForwardBackwardInput,
  field: string,
): Promise<void> {
  const refs = collectSpans(input, field);
  if (refs.length === 0) return;
  const records = await readSampleSequences(
    ctx.clients.doc,
    ctx.tables.registry,
    refs.map((ref) => ref.requestId),
    ctx.tenant,
  );
  checkSpanSources(refs, records);
}

/** `GET sample_sequences/{sequence_id}`: which sampler checkpoint and weights version produced it. */
export async function getSampleSequence(ctx: OperationContext, params: Readonly<Record<string, string>>) {
  const { sequence_id: sequenceId } = parseRequest(getSampleSequenceParams, params);
  const parsed = parseSampleSequenceId(sequenceId);
  const records =
    parsed === undefined
      ? new Map<string, SampleSequencesRecord>()
      : await readSampleSequences(ctx.clients.doc, ctx.tables.registry, [parsed.requestId], ctx.tenant);
  const record = parsed === undefined ? undefined : records.get(parsed.requestId);
  if (parsed === undefined || record === undefined || parsed.index >= record.num_samples) {
    throw new NotFoundError(`sampled sequence ${sequenceId} not found`, {
      context: { field: 'sequence_id' },
    });
  }
  return {
    sequence_id: sampleSequenceId(record.request_id, parsed.index),
    request_id: record.request_id,
    sample_index: parsed.index,
    sampling_session_id: record.sampling_session_id,
    base_model: record.base_model,
    model_path: record.model_path ?? null,
    weights_version: record.weights_version ?? null,
    created_at: new Date(record.created_at).toISOString(),
  };
}
