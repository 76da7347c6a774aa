import { fileURLToPath } from 'node:url';
import { MAX_CONTEXT, VOCAB } from './model.js';

/**
 * The reference model's tokenizer as Hugging Face `tokenizers` files, so the SDK's
 * `TrainingClient.get_tokenizer()` (`AutoTokenizer.from_pretrained(tokenizer_id)`) loads a tokenizer
 * that agrees with the backend: token id i is byte i. It is a BPE with no merges behind a ByteLevel
 * pre-tokenizer: ByteLevel turns each UTF-8 byte into one printable character (the usual GPT-2 byte
 * alphabet), the merge-less BPE leaves every character a token, and the vocabulary maps the character
 * of byte i to id i; the ByteLevel decoder maps the characters back to bytes. No special tokens: all
 * 256 ids are bytes. `local/runtime/generate-tokenizer.ts` writes these files into `tokenizer/`; a unit test
 * checks the committed files match.
 */

/** The folder holding `tokenizer.json` and `tokenizer_config.json`, as an absolute path. */
export const REFERENCE_TOKENIZER_DIR = fileURLToPath(new URL('./tokenizer', import.meta.url));

/**
 * Byte -> character of the ByteLevel alphabet: bytes that are printable Latin-1 characters (other than
 * space and the soft hyphen) stand for themselves; the rest take code points 256, 257, ... in byte order.
 */
export function byteLevelAlphabet(): string[] {
  const printable = (b: number) =>
    (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const alphabet: string[] = [];
  let next = 256;
  for (let b = 0; b < VOCAB; b++) alphabet.push(String.fromCodePoint(printable(b) ? b : next++));
  return alphabet;
}

/** The files, by name, as the text to write (stable key order, so regeneration is byte-identical). */
export function byteTokenizerFiles(): Record<'tokenizer.json' | 'tokenizer_config.json', string> {
  const vocab = Object.fromEntries(byteLevelAlphabet().map((char, id) => [char, id]));
  const byteLevel = { add_prefix_space: false, trim_offsets: false, use_regex: false };
  const tokenizer = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [],
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', ...byteLevel },
    post_processor: null,
    decoder: { type: 'ByteLevel', ...byteLevel },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges: [],
    },
  };
  const tokenizerConfig = {
    tokenizer_class: 'PreTrainedTokenizerFast',
    model_max_length: MAX_CONTEXT,
    clean_up_tokenization_spaces: false,
    added_tokens_decoder: {},
  };
  return {
    'tokenizer.json': `${JSON.stringify(tokenizer, null, 2)}\n`,
    'tokenizer_config.json': `${JSON.stringify(tokenizerConfig, null, 2)}\n`,
  };
}
