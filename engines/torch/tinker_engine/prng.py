"""Counter-based randomness, the same function as shared/backend/reference/prng.ts: every value is a
pure function of its key, never of how many values were drawn before, so a sample resumed from a
restored prefix draws exactly what an uninterrupted one would (P6, G4).
"""

from __future__ import annotations

import numpy as np

MASK32 = 0xFFFF_FFFF
TAG_SAMPLE = 0x53414D50
TAG_ALT = 0x414C5430


def _mix32(value: int) -> int:
    x = value & MASK32
    x ^= x >> 16
    x = (x * 0x7FEB352D) & MASK32
    x ^= x >> 15
    x = (x * 0x846CA68B) & MASK32
    x ^= x >> 16
    return x


def hash_words(*words: int) -> int:
    h = 0x9E3779B9
    for word in words:
        h = _mix32(h ^ _mix32(((word & MASK32) + 0x632BE5AB) & MASK32))
    return h


def seed_words(seed: int) -> tuple[int, int]:
    """An integer seed (any sign, up to 64 bits) as two 32-bit words."""
    bits = seed & 0xFFFF_FFFF_FFFF_FFFF
    return bits & MASK32, bits >> 32


def uniform_at(*words: int) -> float:
    """A uniform double in [0, 1) with 53 random bits, keyed by the words."""
    h = hash_words(*words)
    high = _mix32(h ^ 0x85EBCA6B) >> 5
    low = _mix32(h ^ 0xC2B2AE35) >> 6
    return (high * 67108864 + low) / 9007199254740992


def sample_uniform(seed: int, sample_index: int, position: int) -> float:
    """The draw for generated position `position` of sample `sample_index` (the reference's key)."""
    low, high = seed_words(seed)
    return uniform_at(TAG_SAMPLE, low, high, sample_index, position)


def alt_uniform(seed: int, prompt_position: int, draw: int) -> float:
    """Draw `draw` of `prompt_alt_tokens_k` at prompt position `prompt_position` (the reference's key)."""
    low, high = seed_words(seed)
    return uniform_at(TAG_ALT, low, high, prompt_position, draw)


def _mix32_array(value: np.ndarray) -> np.ndarray:
    """`_mix32` on uint64 arrays of 32-bit values (each product fits 64 bits, so the same bits)."""
    x = value & MASK32
    x ^= x >> np.uint64(16)
    x = (x * np.uint64(0x7FEB352D)) & MASK32
    x ^= x >> np.uint64(15)
    x = (x * np.uint64(0x846CA68B)) & MASK32
    x ^= x >> np.uint64(16)
    return x


def sample_uniforms(keys: list[tuple[int, int, int]]) -> list[float]:
    """`sample_uniform(seed, sample_index, position)` for each key, computed together."""
    if not keys:
        return []
    seeds, indices, positions = zip(*keys, strict=True)
    bits = np.array([seed & 0xFFFF_FFFF_FFFF_FFFF for seed in seeds], dtype=np.uint64)
    words = np.empty((len(keys), 5), dtype=np.uint64)
    words[:, 0] = TAG_SAMPLE
    # seed_words, on the array.
    words[:, 1] = bits & np.uint64(MASK32)
    words[:, 2] = bits >> np.uint64(32)
    words[:, 3] = np.array([index & MASK32 for index in indices], dtype=np.uint64)
    words[:, 4] = np.array([position & MASK32 for position in positions], dtype=np.uint64)
    h = np.full(len(keys), 0x9E3779B9, dtype=np.uint64)
    for column in range(words.shape[1]):
        h = _mix32_array(h ^ _mix32_array((words[:, column] + np.uint64(0x632BE5AB)) & MASK32))
    high = _mix32_array(h ^ np.uint64(0x85EBCA6B)) >> np.uint64(5)
    low = _mix32_array(h ^ np.uint64(0xC2B2AE35)) >> np.uint64(6)
    # Below 2**53 and divided by a power of two: exact in float64, as uniform_at's Python floats.
    return ((high * np.uint64(67108864) + low).astype(np.float64) / 9007199254740992).tolist()
