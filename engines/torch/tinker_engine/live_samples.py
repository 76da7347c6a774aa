"""The live sample states an engine keeps between a sliced call's slices (docs/engine-protocol.md, "Live
sample continuation"), bounded by count and by the bytes of the tensors they hold.

The worker runs a work item's sampling calls side by side, one slice each in turn, so a work item of
more calls than the store holds visits them cyclically; evicting the oldest state for the newest would
then evict every state before its next slice. So a state that does not fit is not kept (its call
replays its next slice) unless stale states (not continued for longer than the idle limit: a call that
was cut or abandoned is never continued) make room. Continuing a state takes it out, and the slice's
end stores it again, so the calls holding states keep them until they finish.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from .sampling import LiveSample


def tensor_bytes(value: Any) -> int:
    """The bytes of every tensor storage reachable from `value` (containers and objects' attributes),
    each storage counted once."""
    seen_objects: set[int] = set()
    seen_storages: set[tuple[str, int]] = set()
    total = 0
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, torch.Tensor):
            storage = item.untyped_storage()
            key = (str(item.device), storage.data_ptr())
            if key not in seen_storages:
                seen_storages.add(key)
                total += storage.nbytes()
            continue
        if item is None or isinstance(item, (str, bytes, int, float, bool)) or id(item) in seen_objects:
            continue
        seen_objects.add(id(item))
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple, set)):
            pending.extend(item)
        elif hasattr(item, "__dict__"):
            pending.extend(vars(item).values())
    return total


@dataclass
class LiveEntry:
    sampler: str
    state: LiveSample
    bytes: int
    stored_at: float


class LiveSampleStore:
    def __init__(
        self, max_count: int, max_bytes: int, idle_seconds: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.idle_seconds = idle_seconds
        self.clock = clock
        # In the order stored, so the stale ones come first.
        self._entries: OrderedDict[str, LiveEntry] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def take(self, key: str) -> LiveEntry | None:
        """The state under `key`, taken out (a key is used once)."""
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.bytes -= entry.bytes
        return entry

    def put(self, key: str, sampler: str, state: LiveSample) -> bool:
        """Keeps `state` under `key` when it fits the bounds, once stale states are dropped; else keeps
        nothing (no live state is evicted for it)."""
        # A LiveSample's tensors are its KV cache's; its rows so far are Python lists.
        size = tensor_bytes(state.cache)
        if self.max_count < 1 or size > self.max_bytes:
            return False
        now = self.clock()
        while not self._fits(size) and self._entries:
            oldest_key, oldest = next(iter(self._entries.items()))
            if now - oldest.stored_at <= self.idle_seconds:
                break
            self.take(oldest_key)
        if not self._fits(size):
            return False
        self._entries[key] = LiveEntry(sampler, state, size, now)
        self.bytes += size
        return True

    def drop_sampler(self, sampler: str) -> None:
        for key in [k for k, entry in self._entries.items() if entry.sampler == sampler]:
            self.take(key)

    def _fits(self, size: int) -> bool:
        return len(self._entries) < self.max_count and self.bytes + size <= self.max_bytes
