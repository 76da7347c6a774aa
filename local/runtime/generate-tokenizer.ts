import { writeFileSync } from 'node:fs';
import path from 'node:path';
import {
  byteTokenizerFiles,
  REFERENCE_TOKENIZER_DIR,
} from '../../shared/backend/reference/byte-tokenizer.js';

/**
 * Writes the reference model's tokenizer files (shared/backend/reference/byte-tokenizer.ts) into the
 * folder get_info's tokenizer_id names locally. Run after changing that module:
 * `node --import tsx local/runtime/generate-tokenizer.ts`.
 */
for (const [name, text] of Object.entries(byteTokenizerFiles())) {
  const file = path.join(REFERENCE_TOKENIZER_DIR, name);
  writeFileSync(file, text);
  console.log(`wrote ${file}`);
}
