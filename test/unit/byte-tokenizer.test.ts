import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  byteLevelAlphabet,
  byteTokenizerFiles,
  REFERENCE_TOKENIZER_DIR,
} from '../../shared/backend/reference/byte-tokenizer.js';
import { readConfig, TOKENIZER_ID_VAR } from '../../shared/base/config.js';

/** Encodes as the shipped tokenizer.json does: each UTF-8 byte to its character, then to its vocab id. */
function encode(text: string): number[] {
  const { model } = JSON.parse(
    readFileSync(path.join(REFERENCE_TOKENIZER_DIR, 'tokenizer.json'), 'utf8'),
  ) as {
    model: { vocab: Record<string, number>; merges: unknown[] };
  };
  expect(model.merges).toEqual([]);
  const alphabet = byteLevelAlphabet();
  return [...Buffer.from(text, 'utf8')].map((byte) => model.vocab[alphabet[byte] as string] as number);
}

describe('the reference tokenizer files', () => {
  it('are the committed ones (regenerate with local/runtime/generate-tokenizer.ts)', () => {
    for (const [name, text] of Object.entries(byteTokenizerFiles())) {
      expect(readFileSync(path.join(REFERENCE_TOKENIZER_DIR, name), 'utf8'), name).toBe(text);
    }
  });

  it('map byte i to token id i through a one-to-one alphabet', () => {
    const alphabet = byteLevelAlphabet();
    expect(new Set(alphabet).size).toBe(256);
    expect(alphabet.every((char) => [...char].length === 1)).toBe(true);
    expect(encode('hi')).toEqual([104, 105]);
    const text = 'héllo wörld 😀\n\t\u0000';
    expect(encode(text)).toEqual([...Buffer.from(text, 'utf8')]);
  });
});

describe('get_info tokenizer_id setting', () => {
  it('is optional: unset or empty means get_info omits it', () => {
    expect(TOKENIZER_ID_VAR).toBe('REFERENCE_TOKENIZER_ID');
    expect(readConfig({}).tokenizerId).toBeUndefined();
    expect(readConfig({ REFERENCE_TOKENIZER_ID: '' }).tokenizerId).toBeUndefined();
    expect(readConfig({ REFERENCE_TOKENIZER_ID: '/opt/tok' }).tokenizerId).toBe('/opt/tok');
  });
});
