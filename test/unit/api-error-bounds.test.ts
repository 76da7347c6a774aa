import { describe, expect, it } from 'vitest';
import {
  boundMessage,
  describeField,
  describeValue,
  MESSAGE_MAX_CHARS,
} from '../../shared/services/api/describe.js';
import { parseRequest } from '../../shared/services/api/request-checks.js';
import * as schemas from '../../shared/services/api/schemas.js';
import { validationErrorOf } from '../support/validation.js';

/** Regression tests for error messages built from attacker-controlled input (hardening finding 4). */

const refusal = validationErrorOf;

const pass = (tokens: unknown, lossInputs: Record<string, unknown> = {}) => ({
  model_id: 'm',
  seq_id: 1,
  forward_backward_input: {
    loss_fn: 'cross_entropy',
    data: [{ model_input: { chunks: [{ tokens }] }, loss_fn_inputs: lossInputs }],
  },
});

describe('error messages stay bounded and never stringify client structure', () => {
  it('a 6,000-deep array where token ids belong is a 400, not a stack overflow', () => {
    const deep = JSON.parse(`${'['.repeat(6000)}1${']'.repeat(6000)}`) as unknown;
    const error = refusal(() => parseRequest(schemas.forwardBackwardRequest, pass([deep])));
    expect(error.message).toMatch(/tokens\.0: expected a token id .*got an array of 1$/);
    const stops = refusal(() =>
      parseRequest(schemas.sampleRequest, {
        sampling_session_id: 's',
        seq_id: 0,
        prompt: { chunks: [{ tokens: [1] }] },
        sampling_params: { max_tokens: 1, stop: [deep] },
      }),
    );
    expect(stops.message.length).toBeLessThanOrEqual(MESSAGE_MAX_CHARS + 32);
  });

  it('a 5 MB string of quotes is echoed as a short excerpt', () => {
    const quotes = '"'.repeat(5_000_000);
    const error = refusal(() => parseRequest(schemas.forwardBackwardRequest, pass([quotes])));
    expect(error.message.length).toBeLessThan(300);
    expect(error.message).toContain('(5000000 chars)');
  });

  it('a huge member name is clipped in the field it names', () => {
    const name = 'k'.repeat(100_000);
    const error = refusal(() =>
      parseRequest(schemas.forwardBackwardRequest, pass([1], { [name]: { data: 'x', dtype: 'float32' } })),
    );
    expect(String(error.context.field).length).toBeLessThan(400);
    expect(error.message.length).toBeLessThanOrEqual(MESSAGE_MAX_CHARS + 32);
  });

  it('describes values by kind, never by content beyond an excerpt', () => {
    expect(describeValue({ a: [1, 2] })).toBe('an object');
    expect(describeValue([1, 2, 3])).toBe('an array of 3');
    expect(describeValue(1.5)).toBe('1.5');
    expect(describeValue('x'.repeat(40))).toBe(JSON.stringify(`${'x'.repeat(32)}... (40 chars)`));
    expect(describeField([])).toBe('body');
    expect(boundMessage('y'.repeat(5000)).length).toBeLessThan(MESSAGE_MAX_CHARS + 32);
  });
});
