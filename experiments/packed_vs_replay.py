"""Which fragmentation shares make the packed reserved estimate read what the allocator replay reads?

    .venv/bin/python experiments/packed_vs_replay.py [graphs]     (about 2 minutes for 200 graphs)

The answers' reserved memory packs each phase's live blocks into the caching allocator's segments
and adds a share of the large (>= 10 MiB) and mid-size (1-10 MiB) blocks for the holes the
allocator cannot fill (:func:`trappm_ray.physics.memory.training_memory`, ``allocator="packed"``);
the replay (``allocator="replay"``, :mod:`trappm_ray.physics.allocator`) runs the step's tensors
through the allocator's rules, too slow for every answer. Here both read ``graphs`` corpus graphs
of the labels (one per architecture, drawn at random, none of an architecture the GPU campaign
measured, so the campaign's rows stay a check nobody set anything on) in four settings at
batches 1-256, and a grid of the two shares is scored by packed / replayed - 1. No measurement
enters. Printed: the shipped shares' and the best shares' error, and per batch.
"""
from __future__ import annotations

import glob
import random
import sys

import numpy as np
import pandas as pd

from trappm_ray.graph.rows import row_to_graph
from trappm_ray.physics import memory as M
from trappm_ray.train.gpu_examples import graph_index

SETTINGS = (("amp-fp16", "sgd-momentum", False), ("amp-bf16", "adamw", False), ("fp32", "adamw", False),
            ("amp-bf16", "adamw", True))
BATCHES = (1, 4, 16, 64, 256)


def campaign_archs() -> set[str]:
    return {a for f in glob.glob("data/labels/h200-*/*.parquet") for a in pd.read_parquet(f, columns=["arch"])["arch"]}


def samples(n: int) -> list[dict]:
    """Per (graph, setting, batch): each phase's live bytes, their packed slack, mid and large bytes; the replay."""
    index = graph_index("data/labels", ())
    skip, one = campaign_archs(), {}
    for key in sorted(index):
        if key[0] not in skip:
            one.setdefault(key[0], key)
    random.seed(0)
    phases: list[tuple] = []

    def record(live: np.ndarray, fragmentation: float) -> float:  # the packed rule's terms, unweighted
        mid = float(live[(live > M.SMALL_SIZE) & (live < M.MID_SIZE)].sum())
        large = float(live[live >= M.MID_SIZE].sum())
        slack = packed_extra(live, 0.0) - M.MID_FRAGMENTATION * mid
        phases.append((float(live.sum()), slack, mid, large))
        return 0.0

    packed_extra, M._reserved_extra = M._reserved_extra, record
    out = []
    for key in random.sample(sorted(one.values()), min(n, len(one))):
        graph = row_to_graph(index[key])
        for precision, optimizer, recompute in SETTINGS:
            for b in BATCHES:
                phases.clear()
                est = M.training_memory(graph, precision, optimizer, batch_size=b, recompute=recompute)
                got = list(phases)
                replayed = M.training_memory(graph, precision, optimizer, batch_size=b, recompute=recompute,
                                             allocator="replay").reserved
                out.append(dict(b=b, phases=got, floor=max(est.allocated, est.floor), replayed=replayed))
    M._reserved_extra = packed_extra
    return out


def errors(rows: list[dict], mid: float, large: float) -> np.ndarray:
    packed = np.array([max(max(a + s + mid * m + large * g for a, s, m, g in r["phases"]), r["floor"]) for r in rows])
    return packed / np.array([max(r["replayed"], r["floor"]) for r in rows]) - 1


def line(e: np.ndarray) -> str:
    return f"median {np.median(e) * 100:+.1f}%, |e| median {np.median(abs(e)) * 100:.1f}%, mean {np.mean(abs(e)) * 100:.1f}%"


if __name__ == "__main__":
    rows = samples(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
    print(f"{len(rows)} (graph, setting, batch) samples")
    print(f"large 5% alone: {line(errors(rows, 0.0, 0.05))}")
    print(f"shipped (mid {M.MID_FRAGMENTATION:.0%}, large {M.FRAGMENTATION:.0%}): {line(errors(rows, M.MID_FRAGMENTATION, M.FRAGMENTATION))}")
    grid = [(float(np.mean(abs(errors(rows, m, g)))), m, g) for m in np.arange(0, 0.31, 0.05) for g in np.arange(0, 0.16, 0.025)]
    _, m, g = min(grid)
    print(f"best mean |e| (mid {m:.0%}, large {g:.1%}): {line(errors(rows, m, g))}")
    b = np.array([r["b"] for r in rows])
    shipped = errors(rows, M.MID_FRAGMENTATION, M.FRAGMENTATION)
    for x in BATCHES:
        print(f"  batch {x}: {line(shipped[b == x])}")
