import { readFileSync } from 'node:fs';
import type { ForwardBackwardMessage } from '../../../shared/wire/forward-backward-request.js';

/** The SDK-made bytes and values under test/support/fixtures/wire (make_fixtures.py). */

const DIR = new URL('../fixtures/wire/', import.meta.url);

export function fixtureBytes(name: string): Uint8Array {
  return new Uint8Array(readFileSync(new URL(`${name}.bin`, DIR)));
}

export function fixtureJson<T>(name: string): T {
  return JSON.parse(readFileSync(new URL(name, DIR), 'utf8')) as T;
}

/** A decoded request in the plain form make_fixtures.py writes (`<name>.expected.json`). */
export interface PlainRequest {
  model_id: string;
  seq_id: number;
  forward_only: boolean;
  loss_fn: string;
  loss_fn_config: Record<string, number | string>;
  data: {
    chunks: number[][];
    loss_fn_inputs: Record<string, { dtype: string; shape: number[]; data: number[] }>;
  }[];
}

export function plainRequest(message: ForwardBackwardMessage): PlainRequest {
  return {
    model_id: message.model_id,
    seq_id: message.seq_id,
    forward_only: message.forward_only,
    loss_fn: message.input.loss_fn,
    loss_fn_config: { ...message.input.loss_fn_config },
    data: message.input.data.map((datum) => ({
      chunks: datum.model_input.chunks.map((chunk) => Array.from(chunk.tokens)),
      loss_fn_inputs: Object.fromEntries(
        Object.entries(datum.loss_fn_inputs).map(([name, tensor]) => [
          name,
          { dtype: tensor.dtype, shape: [...tensor.shape], data: Array.from(tensor.data, Number) },
        ]),
      ),
    })),
  };
}
