"""Counter-based randomness, the same function as shared/backend/reference/prng.ts: every value is a
pure function of its key, never of how many values were drawn before, so a sample resumed from a
restored prefix draws exactly what an uninterrupted one would (P6, G4).
"""

from __future__ import annotations

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
