"""How many rings an all-reduce gets on GPUs joined point to point (an NVLink mesh, no switch).

NCCL runs a ring all-reduce on several rings ("channels") at once, each a cycle through every GPU
of the job; on a mesh each ring takes one link in each hop, so the bus bandwidth is the number of
link-disjoint rings the job's GPUs hold times what one link carries. A DGX-1 (V100) joins its 8
GPUs by 24 NVLinks in a hybrid cube mesh (NVIDIA's DGX-1 V100 system architecture white paper:
a cube whose 12 edges are NVLinks, some doubled, plus the diagonals of two opposite faces; "three
interwoven rings" of single links), so all 8 hold 6 one-way rings while GPUs 0 and 1 share one
link: vTrain's measured V100 tables read 22.5 GB/s on 2 GPUs and 134 on 8. Where the job's GPUs
hold no ring over direct links (GPUs 0-4 of a DGX-1: GPU 4 reaches only GPU 0), a hop may pass
through one other GPU of the job, using a link of each (NCCL's NVLink-through-a-GPU path).

Links are data: ``"0-1:1 0-3:2 ..."`` (GPU pair and link count), a cluster's ``links`` field
(``data/clusters.csv``). A job of n GPUs on a node is taken to run on its first n GPUs (what
``CUDA_VISIBLE_DEVICES`` unset and one process per GPU give).
"""
from __future__ import annotations

import itertools
from functools import lru_cache

# Ring counting enumerates the orders of the GPUs: meshes without a switch have at most 8 GPUs.
MAX_MESH_GPUS = 8


def parse_links(text: str) -> dict[tuple[int, int], int]:
    """``"0-1:1 0-3:2"`` -> {(0, 1): 1, (1, 0): 1, (0, 3): 2, (3, 0): 2}: a link carries one ring
    each way. ValueError on a malformed pair."""
    arcs: dict[tuple[int, int], int] = {}
    for item in text.replace(",", " ").split():
        try:
            pair, count = item.split(":")
            a, b = (int(g) for g in pair.split("-"))
            n = int(count)
        except ValueError:
            raise ValueError(f"links: {item!r} is not 'GPU-GPU:count' (e.g. '0-3:2')") from None
        if a == b or a < 0 or b < 0 or n < 1:
            raise ValueError(f"links: {item!r} must join two different GPUs by at least one link")
        arcs[(a, b)] = arcs[(b, a)] = n
    return arcs


def _hops(arcs: dict[tuple[int, int], int], a: int, b: int, members: range, through: bool
          ) -> list[tuple[tuple[int, int], ...]]:
    """The ways from GPU ``a`` to ``b``: the direct link, and with ``through`` each path over one
    other GPU of ``members``."""
    ways: list[tuple[tuple[int, int], ...]] = [((a, b),)] if (a, b) in arcs else []
    if through:
        ways += [((a, m), (m, b)) for m in members if m not in (a, b) and (a, m) in arcs and (m, b) in arcs]
    return ways


def _cycles(arcs: dict[tuple[int, int], int], n: int, through: bool) -> list[tuple[tuple[int, int], ...]]:
    """Every directed ring through GPUs 0..n-1 as the links (arcs) it takes."""
    members = range(n)
    out = []
    for order in itertools.permutations(range(1, n)):
        stops = (0, *order, 0)
        legs = [_hops(arcs, stops[i], stops[i + 1], members, through) for i in range(n)]
        out += [tuple(arc for leg in choice for arc in leg) for choice in itertools.product(*legs)]
    return out


def _pack(cycles: list[tuple[tuple[int, int], ...]], capacity: dict[tuple[int, int], int], bound: int) -> int:
    """The most rings of ``cycles`` (each taken any number of times) that fit ``capacity``,
    stopping at ``bound``: a depth-first search over rings in order, memoised on what is left."""
    seen: dict[tuple[tuple[int, ...], int], int] = {}
    keys = sorted(capacity)

    def search(start: int, left: dict[tuple[int, int], int]) -> int:
        state = (tuple(left[k] for k in keys), start)
        if state in seen:
            return seen[state]
        best = 0
        for i in range(start, len(cycles)):
            use = cycles[i]
            if all(left[a] >= use.count(a) for a in set(use)):
                for a in use:
                    left[a] -= 1
                best = max(best, 1 + search(i, left))
                for a in use:
                    left[a] += 1
                if best >= bound:
                    break
        seen[state] = best
        return best

    return search(0, dict(capacity))


@lru_cache(maxsize=64)
def ring_count(links: str, n: int) -> int:
    """Link-disjoint one-way rings through GPUs 0..n-1 of the mesh ``links`` (:func:`parse_links`):
    over direct links, else (none) with hops through one other GPU of the job; 0 if still none.
    ValueError beyond :data:`MAX_MESH_GPUS` GPUs."""
    if n > MAX_MESH_GPUS:
        raise ValueError(f"ring counting on a mesh covers up to {MAX_MESH_GPUS} GPUs, not {n}")
    if n < 2:
        return 0
    arcs = {k: v for k, v in parse_links(links).items() if max(k) < n}
    bound = min(sum(v for (a, _), v in arcs.items() if a == g) for g in range(n))
    if bound == 0:
        return 0
    for through in (False, True):
        cycles = _cycles(arcs, n, through)
        if cycles:
            return _pack(cycles, arcs, bound)
    return 0


__all__ = ["MAX_MESH_GPUS", "parse_links", "ring_count"]
