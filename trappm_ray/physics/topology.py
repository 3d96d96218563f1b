"""How many rings an all-reduce gets on GPUs joined point to point (an NVLink mesh, no switch).

NCCL runs a ring all-reduce on several rings ("channels") at once, each a cycle through every GPU
of the job; on a mesh each ring takes one link in each hop, so the bus bandwidth is the number of
rings the job's GPUs' links carry at once times what one link carries: the most rings, rings
sharing a link each taking a share of it, that no link carries beyond its capacity (a linear
program over the job's rings; on a DGX-1's GPUs 0..n-1 it is a whole number, the rings NCCL
builds). A DGX-1 (V100) joins its 8 GPUs by 24 NVLinks in a hybrid cube mesh (NVIDIA's DGX-1 V100 system architecture white paper:
a cube whose 12 edges are NVLinks, some doubled, plus the diagonals of two opposite faces; "three
interwoven rings" of single links), so all 8 hold 6 one-way rings while GPUs 0 and 1 share one
link: vTrain's measured V100 tables read 22.5 GB/s on 2 GPUs and 134 on 8. Where the job's GPUs
hold no ring over direct links (GPUs 0-4 of a DGX-1: GPU 4 reaches only GPU 0), a hop between
two GPUs with no link of their own may pass through one other GPU of the job, using a link of
each (NCCL's NVLink-through-a-GPU path).

Links are data: ``"0-1:1 0-3:2 ..."`` (GPU pair and link count), a cluster's ``links`` field
(``data/clusters.csv``). A job of n GPUs on a node is taken to run on its first n GPUs (what
``CUDA_VISIBLE_DEVICES`` unset and one process per GPU give).
"""
from __future__ import annotations

import itertools
from functools import lru_cache

import numpy as np

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
    """The ways from GPU ``a`` to ``b``: their direct link, else with ``through`` each path over
    one other GPU of ``members``."""
    if (a, b) in arcs:
        return [((a, b),)]
    if not through:
        return []
    return [((a, m), (m, b)) for m in members if m not in (a, b) and (a, m) in arcs and (m, b) in arcs]


def _cycles(arcs: dict[tuple[int, int], int], n: int, through: bool) -> list[tuple[tuple[int, int], ...]]:
    """Every directed ring through GPUs 0..n-1 as the links (arcs) it takes."""
    members = range(n)
    out = []
    for order in itertools.permutations(range(1, n)):
        stops = (0, *order, 0)
        legs = [_hops(arcs, stops[i], stops[i + 1], members, through) for i in range(n)]
        out += [tuple(arc for leg in choice for arc in leg) for choice in itertools.product(*legs)]
    return out


def _pack(cycles: list[tuple[tuple[int, int], ...]], capacity: dict[tuple[int, int], int]) -> float:
    """The most rings of ``cycles`` at once, a ring's share of a link counted against the link's
    capacity: max sum x subject to, per link, the rings through it summing to at most its
    capacity (HiGHS; a few thousand rings on 56 links solve in milliseconds, where an exhaustive
    search for whole rings ran for minutes on 8 GPUs all joined by one link each)."""
    # the solver is imported here, not with the module: every prediction imports the cluster
    # model, and only a meshed cluster (a DGX-1, a user's links) ever counts rings
    from scipy.optimize import linprog

    keys = sorted(capacity)
    at = {k: i for i, k in enumerate(keys)}
    uses = np.zeros((len(keys), len(cycles)))
    for j, cycle in enumerate(cycles):
        for arc in cycle:
            uses[at[arc], j] += 1
    found = linprog(-np.ones(len(cycles)), A_ub=uses, b_ub=[capacity[k] for k in keys], bounds=(0, None),
                    method="highs")
    return round(-found.fun, 6) if found.success else 0.0


@lru_cache(maxsize=64)
def _job_rings(links: str, n: int) -> tuple[dict[tuple[int, int], int], list[tuple[tuple[int, int], ...]]]:
    """The links among GPUs 0..n-1 of the mesh ``links`` and the rings through all of them: over
    direct links, else (none) with hops through one other GPU of the job; none if still none.
    ValueError beyond :data:`MAX_MESH_GPUS` GPUs."""
    if n > MAX_MESH_GPUS:
        raise ValueError(f"ring counting on a mesh covers up to {MAX_MESH_GPUS} GPUs, not {n}")
    arcs = {k: v for k, v in parse_links(links).items() if max(k) < n}
    if n < 2 or any(not any(a == g for a, _ in arcs) for g in range(n)):
        return arcs, []  # a GPU of the job with no link to another
    for through in (False, True):
        cycles = _cycles(arcs, n, through)
        if cycles:
            return arcs, cycles
    return arcs, []


def holds_ring(links: str, n: int) -> bool:
    """Whether GPUs 0..n-1 of the mesh ``links`` hold any ring (no solver needed to say so)."""
    return bool(_job_rings(links, n)[1])


@lru_cache(maxsize=64)
def ring_count(links: str, n: int) -> float:
    """One-way rings through GPUs 0..n-1 of the mesh ``links`` (:func:`parse_links`) carried at
    once (:func:`_pack`; the rings of :func:`_job_rings`), 0 where they hold none."""
    arcs, cycles = _job_rings(links, n)
    return _pack(cycles, arcs) if cycles else 0.0


__all__ = ["MAX_MESH_GPUS", "parse_links", "holds_ring", "ring_count"]
