/** `count` token ids inside a vocabulary of `vocab`, deterministic by `seed` (no special ids: 0 stays out). */
export function engineUserTokens(vocab: number, count: number, seed: number): number[] {
  const tokens: number[] = [];
  let x = seed * 2654435761;
  for (let i = 0; i < count; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    tokens.push(1 + (x % Math.max(1, Math.min(vocab, 1000) - 1)));
  }
  return tokens;
}
