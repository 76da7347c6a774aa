import type { In } from '../../../shared/client/tinker-client.js';
import type { datum } from '../../../shared/services/api/schemas.js';

/**
 * The demo's built-in dataset: a few short chants, encoded as bytes for the byte-level reference
 * model (token id = byte value). Small and repetitive on purpose: 30 steps visibly teach it.
 */
export const PHRASES: readonly string[] = [
  'la la la la la la la la.',
  'na na na na na na na.',
  'la na la na la na la na.',
  'na la na la na la.',
];

export const PROMPT = 'la ';

export const encode = (text: string): number[] => [...Buffer.from(text, 'utf8')];

/** Bytes back to text, with bytes that are not printable text shown as `·`. */
export function decode(tokens: readonly number[]): string {
  return Buffer.from(tokens)
    .toString('utf8')
    .replace(/[\p{Cc}\ufffd]/gu, '·');
}

/** Next-token prediction on one phrase: inputs are its bytes but the last, targets the bytes after. */
export function phraseDatum(text: string): In<typeof datum> {
  const bytes = encode(text);
  const inputs = bytes.slice(0, -1);
  return {
    model_input: { chunks: [{ type: 'encoded_text', tokens: inputs }] },
    loss_fn_inputs: {
      target_tokens: { data: bytes.slice(1), dtype: 'int64', shape: [inputs.length] },
    },
  };
}
