"""The caching allocator's replay, rule by rule, on requests whose segments are worked out by hand."""
from __future__ import annotations

import numpy as np

from trappm_ray.physics.allocator import CachingAllocator, replay, round_request, segment_size

MiB = 1 << 20


def test_requests_round_and_map_the_allocators_segment_sizes():
    assert round_request(1) == 512 and round_request(513) == 1024
    assert segment_size(512) == 2 * MiB  # small pool
    assert segment_size(3 * MiB) == 20 * MiB  # a large request under 10 MiB shares a 20 MiB segment
    assert segment_size(11 * MiB + 1) == 12 * MiB  # its own segment, rounded up to 2 MiB


def test_a_freed_block_serves_a_smaller_request_best_fit():
    a = CachingAllocator()
    x = a.malloc(3 * MiB)
    a.free(x)
    a.malloc(2 * MiB)
    assert a.reserved == 20 * MiB
    big = a.malloc(30 * MiB)
    small = a.malloc(12 * MiB)  # 18 MiB are free in the first segment: the best fit, not the 30
    assert a.reserved == 20 * MiB + 30 * MiB and small[0] == 0 and big[0] == 1


def test_a_large_blocks_rest_of_one_mib_or_less_stays_with_it():
    a = CachingAllocator()
    a.malloc(3 * MiB)  # a 20 MiB segment, 17 MiB split off free
    a.malloc(16 * MiB)  # takes the 17: the 1 MiB rest is not split, so nothing is left
    a.malloc(int(1.5 * MiB))
    assert a.reserved == 40 * MiB


def test_freed_neighbours_merge_into_one_block():
    a = CachingAllocator()
    x, y, z = (a.malloc(5 * MiB) for _ in range(3))
    a.free(x)
    a.free(y)  # x + y: one free 10 MiB block
    a.malloc(9 * MiB)
    assert a.reserved == 20 * MiB
    a.free(z)
    a.malloc(10 * MiB)  # z merged with the free tail behind it: 10 MiB
    assert a.reserved == 20 * MiB


def test_replay_keeps_what_lives_all_step_and_reuses_the_first_steps_segments():
    steps = 4
    size = np.array([30 * MiB, 3 * MiB, 3 * MiB])
    start, end = np.array([0, 1, 2]), np.array([steps, 3, 4])
    first = np.array([-1, 0, 0])
    one, two = replay(size, start, end, first, steps, repeats=1), replay(size, start, end, first, steps)
    assert one == two == 30 * MiB + 20 * MiB
    # a kept tensor first allocated late (optimizer state) can take a freed activation's block
    late = replay(np.array([3 * MiB, 4 * MiB]), np.array([0, 0]), np.array([steps, 2]), np.array([3, 0]), steps)
    assert late == 20 * MiB
