"""PyTorch's CUDA caching allocator, replayed over the tensors of a training step.

``torch.cuda.max_memory_reserved`` counts the segments the allocator mapped from the driver, not
the tensors in them: a 3 MiB activation takes a 20 MiB segment when no cached free block holds
it, and the rest of that segment holds only what later fits there. How far a step's reserved
memory sits above its live tensors therefore depends on the order and sizes of its requests and
frees, which :mod:`trappm_ray.physics.memory` lays out as byte intervals on the step's timeline.
:func:`replay` runs them through the allocator's rules (``c10/cuda/CUDACachingAllocator.cpp``,
PyTorch 2.x defaults, no ``PYTORCH_CUDA_ALLOC_CONF``, one stream):

* a request is rounded up to 512 bytes; one of at most 1 MiB is served from the small pool,
  a larger one from the large pool;
* it takes the smallest cached free block of its pool that holds it (best fit), and the rest of
  that block is split off as a free block when it is at least 512 bytes (small pool) or more
  than 1 MiB (large pool); a smaller rest stays with the request;
* with no such block a segment is mapped: 2 MiB for a small request, 20 MiB for a large one
  under 10 MiB, the request rounded up to 2 MiB otherwise;
* a freed block merges with free neighbours of its segment; segments stay mapped (nothing calls
  ``empty_cache``), so the reserved memory a measurement reads after its warm-up step is every
  segment mapped by then.

On the GPU campaign's H200 rows (``docs/memory.md``) the replay reads reserved peaks at 3.9-7.2%
median error per setting (convnets and small transformers reserve 10-16% above their allocated
peak, large models 3-5%, and the replay tells them apart). It costs a Python loop over every
allocation, which is why the memory model's answers pack each phase's live blocks into segments
with fragmentation shares set where that packing reads what the replay reads on corpus graphs
(4.3-7.8% there), and ``training_memory(..., allocator="replay")`` is the check beside it.
"""
from __future__ import annotations

import bisect

import numpy as np

BLOCK = 512  # every request rounded up to a multiple of this (kMinBlockSize)
SMALL_SIZE = 1 << 20  # requests up to this size come from the small pool (kSmallSize)
SMALL_SEGMENT = 2 << 20  # a small-pool segment (kSmallBuffer)
MID_SIZE = 10 << 20  # large requests below this share a LARGE_SEGMENT (kMinLargeAlloc)
LARGE_SEGMENT = 20 << 20  # kLargeBuffer
ROUND_LARGE = 2 << 20  # a larger request's own segment is rounded up to this (kRoundLarge)


def round_request(size: int) -> int:
    """Bytes a request of ``size`` takes from its block."""
    return max(BLOCK, -(-int(size) // BLOCK) * BLOCK)


def segment_size(size: int) -> int:
    """Bytes of the segment mapped for a request of ``size`` (already rounded) that no cached
    block holds."""
    if size <= SMALL_SIZE:
        return SMALL_SEGMENT
    if size < MID_SIZE:
        return LARGE_SEGMENT
    return -(-size // ROUND_LARGE) * ROUND_LARGE


class CachingAllocator:
    """The segments and free blocks of one device's caching allocator.

    A block is ``(segment, offset)``; each segment keeps its blocks by offset (``size, free``)
    and by end offset, so that a freed block finds its neighbours in constant time. Free blocks
    of each pool sit in one list sorted by ``(size, segment, offset)``: a best fit is a bisection.
    """

    def __init__(self) -> None:
        self.reserved = 0  # bytes of segments mapped
        self._free: dict[bool, list[tuple[int, int, int]]] = {True: [], False: []}
        self._blocks: list[dict[int, list]] = []  # per segment: offset -> [size, free]
        self._ends: list[dict[int, int]] = []  # per segment: end offset -> offset
        self._small: list[bool] = []  # per segment: its pool

    def malloc(self, size: int) -> tuple[int, int]:
        """A block of ``size`` bytes (rounded): the best-fitting free block, split, or a new segment."""
        size = round_request(size)
        small = size <= SMALL_SIZE
        pool = self._free[small]
        i = bisect.bisect_left(pool, (size, -1, -1))
        if i < len(pool):
            have, seg, off = pool.pop(i)
        else:
            have, seg, off = segment_size(size), len(self._blocks), 0
            self._blocks.append({})
            self._ends.append({})
            self._small.append(small)
            self.reserved += have
        rest = have - size
        if (rest >= BLOCK) if small else (rest > SMALL_SIZE):
            self._put(seg, off + size, rest, True)
        else:
            size = have
        self._put(seg, off, size, False)
        return seg, off

    def free(self, block: tuple[int, int]) -> None:
        """Return ``block`` to its pool, merged with its free neighbours."""
        seg, off = block
        blocks, ends, pool = self._blocks[seg], self._ends[seg], self._free[self._small[seg]]
        size = blocks[off][0]
        nxt = off + size
        if nxt in blocks and blocks[nxt][1]:
            size += self._take(seg, nxt)
        if off in ends and blocks[ends[off]][1]:
            prev = ends[off]
            size += self._take(seg, prev)
            del blocks[off]
            off = prev
        del ends[nxt]
        self._put(seg, off, size, True)

    def _put(self, seg: int, off: int, size: int, free: bool) -> None:
        self._blocks[seg][off] = [size, free]
        self._ends[seg][off + size] = off
        if free:
            bisect.insort(self._free[self._small[seg]], (size, seg, off))

    def _take(self, seg: int, off: int) -> int:
        """Remove the free block at ``off`` of ``seg`` (to merge it) and return its size."""
        size = self._blocks[seg].pop(off)[0]
        del self._ends[seg][off + size]
        pool = self._free[self._small[seg]]
        del pool[bisect.bisect_left(pool, (size, seg, off))]
        return size


def replay(size: np.ndarray, start: np.ndarray, end: np.ndarray, first: np.ndarray, steps: int,
           repeats: int = 2) -> float:
    """Bytes of segments mapped after ``repeats`` training steps of these tensors.

    Args:
        size, start, end: per tensor, its bytes and the timeline steps it is live in
            (``start <= t < end``); one live through the whole step (``start <= 0`` and
            ``end >= steps``) is allocated once and kept.
        first: per tensor kept, when the first training step allocates it (weights before it
            starts: -1; optimizer state at the first ``step()``); ignored for the others.
        steps: the step's timeline length.
        repeats: training steps replayed: the second reuses the first one's segments, as the
            steps a measurement times after its warm-up do.
    """
    size = np.asarray(size, np.int64)
    kept = (np.asarray(start) <= 0) & (np.asarray(end) >= steps)
    each = np.flatnonzero(~kept)
    once = np.flatnonzero(kept)
    # events (time, kind, tensor): at one step frees (kind 0) come first, a tensor dead at t not
    # being live at t (the intervals' rule); then allocations in tensor order
    t = np.concatenate([np.asarray(end)[each], np.asarray(start)[each]])
    kind = np.concatenate([np.zeros(len(each), np.int64), np.ones(len(each), np.int64)])
    who = np.concatenate([each, each])
    first_t = np.concatenate([np.asarray(first)[once], t])
    orders = [(t, kind, who), (first_t, np.concatenate([np.ones(len(once), np.int64), kind]),
                               np.concatenate([once, who]))]
    alloc, live, sizes = CachingAllocator(), {}, size.tolist()
    malloc, free = alloc.malloc, alloc.free
    for k in range(repeats):
        when, what, which = orders[1] if k == 0 else orders[0]
        order = np.lexsort((which, what, when))
        for is_alloc, i in zip(what[order].tolist(), which[order].tolist()):
            if is_alloc:
                live[i] = malloc(sizes[i])
            else:
                free(live.pop(i))
    return float(alloc.reserved)


__all__ = ["BLOCK", "SMALL_SIZE", "SMALL_SEGMENT", "MID_SIZE", "LARGE_SEGMENT", "ROUND_LARGE", "CachingAllocator",
           "round_request", "segment_size", "replay"]
