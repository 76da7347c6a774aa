import { describe, expect, it } from 'vitest';
import { passInputFromJson } from '../../shared/backend/pass-input.js';
import type { ValidationError } from '../../shared/base/errors.js';
import { acceptsProtobuf } from '../../shared/services/api/bodies.js';
import { archiveUrlLifetime } from '../../shared/services/api/checkpoint-lifecycle.js';
import {
  checkForwardInput,
  checkJsonPassParts,
  parseRequest,
} from '../../shared/services/api/request-checks.js';
import * as schemas from '../../shared/services/api/schemas.js';
import { decodeForwardBackwardRequest } from '../../shared/wire/forward-backward-request.js';
import { CHUNKS_PER_DATUM, partLimits } from '../../shared/wire/request-parts.js';
import { decompressZstdBounded, MAX_ZSTD_FRAMES } from '../../shared/wire/zstd.js';
import { validationErrorOf } from '../support/validation.js';
import { fixtureBytes } from '../support/wire/fixtures.js';
import {
  EMPTY_ZSTD_FRAME,
  emptyJsonDatums,
  emptyProtobufChunks,
  emptyProtobufDatums,
  emptyZstdFrames,
  jsonDatumWithTargetShape,
  shapeOfRank,
} from '../support/wire/hostile-bodies.js';
import { float32Tensor, int64Tensor, pbDatum, pbForwardBackward } from '../support/wire/requests.js';

/**
 * Issue 25: the work a refused request costs is bounded by its size, never by what it declares.
 * Each bound is shown by a deterministic count (frames inflated, datums built, issues built) that
 * the unbounded code makes grow with the declaration; and the shapes and Accept headers it named.
 */

const MAX_DATUMS = 1024;
const LIMITS = { maxBodyBytes: 5 * 1024 * 1024, maxDatums: MAX_DATUMS, maxTokensPerRequest: 1_048_576 };

const rejection = validationErrorOf;

function field(error: ValidationError): unknown {
  return error.context.field;
}

describe('zstd: frames and windows are counted on the headers, before any is inflated', () => {
  it('refuses 20,000 empty 8 MiB-window frames (180 KB) with a 413, having inflated none', () => {
    const counts = { framesInflated: 0 };
    const error = rejection(() => decompressZstdBounded(emptyZstdFrames(20_000), 5 << 20, counts));
    expect(error.status).toBe(413);
    expect(field(error)).toBe('body');
    expect(error.message).toMatch(`more than the ${MAX_ZSTD_FRAMES} frames`);
    expect(counts.framesInflated).toBe(0);
  });

  it('refuses frames whose windows together pass 16 MiB (three 8 MiB windows), having inflated none', () => {
    const counts = { framesInflated: 0 };
    const error = rejection(() => decompressZstdBounded(emptyZstdFrames(3), 5 << 20, counts));
    expect(error.status).toBe(413);
    expect(error.message).toMatch(/windows need more than/);
    expect(counts.framesInflated).toBe(0);
  });

  it('inflates a body of up to 16 small frames, and the SDK fixture (one frame)', () => {
    const small = Uint8Array.from(EMPTY_ZSTD_FRAME);
    small[5] = 0x00; // 1 KiB window
    const frames = new Uint8Array(small.length * MAX_ZSTD_FRAMES);
    for (let i = 0; i < MAX_ZSTD_FRAMES; i++) frames.set(small, i * small.length);
    const counts = { framesInflated: 0 };
    expect(decompressZstdBounded(frames, 1 << 20, counts)).toHaveLength(0);
    expect(counts.framesInflated).toBe(MAX_ZSTD_FRAMES);
    expect(decompressZstdBounded(fixtureBytes('cross-entropy-4.zst'), 1 << 20).length).toBeGreaterThan(0);
  });
});

describe('protobuf: datums and chunks are counted on the bytes, before any message is built', () => {
  const decode = (bytes: Uint8Array) => {
    const counts = { datumsDecoded: 0 };
    const error = rejection(() =>
      decodeForwardBackwardRequest(bytes, { limits: partLimits(MAX_DATUMS), counts }),
    );
    return { error, counts };
  };

  it('refuses 2,500,000 empty datums with a 413 naming data, having built none', () => {
    const { error, counts } = decode(emptyProtobufDatums(2_500_000));
    expect(error.status).toBe(413);
    expect(field(error)).toBe('data');
    expect(error.message).toMatch(`at least ${MAX_DATUMS + 1} datums exceeds the limit of ${MAX_DATUMS}`);
    expect(counts.datumsDecoded).toBe(0);
  });

  it('refuses more chunks than 16 per datum of MAX_DATUMS, having built none', () => {
    const { error, counts } = decode(emptyProtobufChunks(CHUNKS_PER_DATUM * MAX_DATUMS + 1));
    expect(error.status).toBe(413);
    expect(field(error)).toBe('data');
    expect(error.message).toMatch(/model_input chunks exceeds the limit of 16384/);
    expect(counts.datumsDecoded).toBe(0);
  });

  it('refuses a loss input of rank 3, or of 100,000 dimensions, naming its shape, having built none', () => {
    for (const rank of [3, 100_000]) {
      const bytes = pbForwardBackward({
        data: [pbDatum([1, 2, 3, 4], { target_tokens: int64Tensor([2, 3, 4, 5], shapeOfRank(rank, 4)) })],
      });
      const { error, counts } = decode(bytes);
      expect(error.status).toBe(400);
      expect(field(error)).toBe('data.0.loss_fn_inputs.target_tokens.shape');
      expect(error.message).toMatch(`has rank ${rank}`);
      expect(counts.datumsDecoded).toBe(0);
    }
  });

  it('refuses more than 16 loss inputs in a datum and more than 16 loss_fn_config entries', () => {
    const inputs = Object.fromEntries(
      Array.from({ length: 17 }, (_, i) => [`x${i}`, float32Tensor([1, 1, 1])]),
    );
    const many = decode(pbForwardBackward({ data: [pbDatum([1, 2, 3], inputs)] }));
    expect(field(many.error)).toBe('data.0.loss_fn_inputs');
    expect(many.counts.datumsDecoded).toBe(0);
    const config = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 1]));
    const configured = decode(pbForwardBackward({ lossFnConfig: config }));
    expect(field(configured.error)).toBe('loss_fn_config');
  });

  it('decodes a request at the limits (MAX_DATUMS datums)', () => {
    const counts = { datumsDecoded: 0 };
    const bytes = pbForwardBackward({ data: Array.from({ length: MAX_DATUMS }, () => pbDatum([1])) });
    decodeForwardBackwardRequest(bytes, { limits: partLimits(MAX_DATUMS), counts });
    expect(counts.datumsDecoded).toBe(MAX_DATUMS);
  });
});

describe('JSON: validation stops at the first bad element, and counts datums before the schema runs', () => {
  const issuesOf = (body: unknown) => {
    const parsed = schemas.forwardBackwardRequest.safeParse(body);
    expect(parsed.success).toBe(false);
    return parsed.error?.issues.length ?? 0;
  };

  it('builds at most 3 issues for data: [{}] x 400,000, and refuses it with a 413 before parsing', () => {
    const body = JSON.parse(emptyJsonDatums('model-1', 1, 400_000)) as unknown;
    expect(issuesOf(body)).toBeLessThanOrEqual(3);
    const error = rejection(() => checkJsonPassParts(body, 'forward_backward_input', LIMITS));
    expect(error.status).toBe(413);
    expect(field(error)).toBe('forward_backward_input.data');
    expect(error.message).toMatch(/400000 datums exceeds the limit of 1024/);
  });

  it('refuses more chunks than 16 per datum of MAX_DATUMS before parsing', () => {
    const chunks = Array.from({ length: CHUNKS_PER_DATUM * MAX_DATUMS + 1 }, () => ({}));
    const body = {
      forward_backward_input: { data: [{ model_input: { chunks } }], loss_fn: 'cross_entropy' },
    };
    const error = rejection(() => checkJsonPassParts(body, 'forward_backward_input', LIMITS));
    expect(error.status).toBe(413);
    expect(error.message).toMatch(/16385 model_input chunks exceeds the limit of 16384/);
  });

  it('builds at most 3 issues for any long bad array or record of a pass or a sample', () => {
    const good = jsonDatumWithTargetShape([1, 2], [2]);
    const many = 100_000;
    const pass = (datum: unknown) => ({
      model_id: 'model-1',
      seq_id: 1,
      forward_backward_input: { data: [good, datum], loss_fn: 'cross_entropy' },
    });
    const bad = Array.from({ length: many }, () => 'x');
    expect(issuesOf(pass({ ...good, model_input: { chunks: bad } }))).toBeLessThanOrEqual(3);
    const tensors = Object.fromEntries(Array.from({ length: 16 }, (_, i) => [`t${i}`, {}]));
    expect(issuesOf(pass({ ...good, loss_fn_inputs: tensors }))).toBeLessThanOrEqual(3);
    const target = good.loss_fn_inputs.target_tokens;
    for (const member of ['shape', 'sparse_crow_indices', 'sparse_col_indices']) {
      const tensor = { ...target, [member]: bad };
      expect(issuesOf(pass({ ...good, loss_fn_inputs: { target_tokens: tensor } }))).toBe(1);
    }
    const sample = schemas.sampleRequest.safeParse({
      sampling_session_id: 's',
      seq_id: 0,
      prompt: { chunks: [{ tokens: [1] }] },
      sampling_params: { max_tokens: 1, stop: Array.from({ length: many }, () => 1.5) },
    });
    expect(sample.error?.issues).toHaveLength(1);
  });

  it('names a loss input over 16 and the first bad element, as zod did', () => {
    const tensors = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`t${i}`, {}]));
    const body = {
      model_id: 'model-1',
      seq_id: 1,
      forward_backward_input: {
        data: [{ ...jsonDatumWithTargetShape([1], [1]), loss_fn_inputs: tensors }],
        loss_fn: 'cross_entropy',
      },
    };
    const error = rejection(() => parseRequest(schemas.forwardBackwardRequest, body));
    expect(field(error)).toBe('forward_backward_input.data.0.loss_fn_inputs');
    expect(error.message).toMatch(/17 entries exceeds the limit of 16/);
  });
});

describe('intake refuses the tensor shapes the losses cannot use (JSON; protobuf above)', () => {
  const check = (shape: number[], tokens = [1, 2, 3, 4]) => {
    const body = {
      model_id: 'model-1',
      seq_id: 1,
      forward_backward_input: { data: [jsonDatumWithTargetShape(tokens, shape)], loss_fn: 'cross_entropy' },
    };
    const request = parseRequest(schemas.forwardBackwardRequest, body);
    const input = passInputFromJson(request.forward_backward_input, 'forward_backward_input');
    return checkForwardInput(input, 'forward_backward_input', LIMITS);
  };
  const target = 'forward_backward_input.data.0.loss_fn_inputs.target_tokens';

  it('rank 3 ([4, 1, 1]) and a 100,000-dimension shape: 400 naming the shape', () => {
    for (const shape of [[4, 1, 1], shapeOfRank(100_000, 4)]) {
      const error = rejection(() => check(shape));
      expect(error.status).toBe(400);
      expect(field(error)).toBe(`${target}.shape`);
      expect(error.message).toMatch(`has rank ${shape.length}`);
    }
  });

  it('a shape whose product is not the data length: 400 naming the shape', () => {
    const error = rejection(() => check([5]));
    expect(field(error)).toBe(`${target}.shape`);
    expect(error.message).toMatch(/holds 5 values, data has 4/);
  });

  it('[N] and [N, 1] pass', () => {
    expect(check([4])).toBe(4);
    expect(check([4, 1])).toBe(4);
  });
});

describe('Accept (RFC 9110): media types matched whole, q-values weighed', () => {
  it.each([
    [undefined, false],
    ['application/x-protobuf', true],
    ['application/x-protobuf, application/json', true],
    ['APPLICATION/X-PROTOBUF ; Q=0.5', true],
    ['application/x-protobuf;q=0, application/json', false],
    ['application/x-protobuf;q=0', false],
    ['application/x-protobufXYZ', false],
    ['application/x-protobuf-foo, application/json', false],
    ['*/*', false],
    ['application/*', false],
    ['application/json;q=0.9, application/x-protobuf;q=0.5', false],
    ['application/json;q=0.5, application/x-protobuf;q=0.9', true],
    ['application/x-protobuf;q=0.1, application/*;q=0.5', false],
    ['application/x-protobuf;q=2', false],
    ['application/x-protobuf;q=abc, application/json', false],
  ])('%j -> protobuf %s', (accept, protobuf) => {
    expect(acceptsProtobuf(accept)).toBe(protobuf);
  });
});

describe('archive URLs (C4): ARCHIVE_URL_SECONDS, never past the checkpoint expiry', () => {
  it('lives ARCHIVE_URL_SECONDS, or until the expiry when that is sooner (1 s at least)', () => {
    const now = 1_000_000;
    expect(archiveUrlLifetime(60, {}, now)).toBe(60);
    expect(archiveUrlLifetime(60, { expires_at: now + 3_600_000 }, now)).toBe(60);
    expect(archiveUrlLifetime(60, { expires_at: now + 10_500 }, now)).toBe(10);
    expect(archiveUrlLifetime(60, { expires_at: now + 300 }, now)).toBe(1);
  });
});
