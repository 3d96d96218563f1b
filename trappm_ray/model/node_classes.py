"""Exact compression of a graph for the two-layer regressor: nodes grouped by what they compute.

A DNN graph repeats itself: the blocks of a stage have nodes with identical features and
identical neighbourhoods. The regressor's first SAGEConv sees a node only through its features
``x`` and the mean of its in-neighbours' features ``agg``; nodes with equal ``[x, agg]`` rows
(a *first-layer class*) get equal first-layer outputs. The second layer sees the node's own
first-layer class and the mean over its in-neighbours' classes; nodes that agree on both (a
*second-layer class*) get equal outputs, and sum pooling only needs each class's node count.

So the regressor can run on the classes instead of the nodes with the same result (up to float
summation order): on this project's graphs a graph of ~1,040 nodes and ~2,440 edges has ~190
first-layer classes, ~250 second-layer classes and ~660 class-to-class edges. This holds while
node embeddings are not dropped out per node (``Regressor.node_dropout`` off).

Fields added to a graph by :func:`node_classes` (``u_`` = unique)::

    u_x, u_agg   [U1, F]   features and neighbour mean of each first-layer class
    u_root       [U2]      first-layer class of each second-layer class's own node
    u_count      [U2]      nodes in each second-layer class
    u_src, u_dst [E2]      first-layer class -> second-layer class of the in-neighbours
    u_weight     [E2]      share of the second-layer class's in-neighbours in that class
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

# the count each class field's rows follow: first-layer classes, second-layer classes, class edges
CLASS_LEVELS = {"u_x": "u1", "u_agg": "u1", "u_root": "u2", "u_count": "u2",
                "u_src": "ue", "u_dst": "ue", "u_weight": "ue"}
CLASS_KEYS = tuple(CLASS_LEVELS)


def node_classes(x: Tensor, agg: Tensor, edge_index: Tensor) -> dict[str, Tensor]:
    """The class fields of one graph (see the module docstring).

    Args:
        x: ``[N, F]`` node features. agg: ``[N, F]`` mean of in-neighbours' ``x`` (zeros for
            none). edge_index: ``[2, E]`` edges source -> target.
    """
    n = x.size(0)
    rows = torch.cat([x, agg], 1).numpy()
    # dicts of row bytes: ~10x faster than np.unique(axis=0), which sorts structured rows
    seen: dict[bytes, int] = {}
    id1 = np.array([seen.setdefault(r.tobytes(), len(seen)) for r in rows], dtype=np.int64)
    rows = rows[np.unique(id1, return_index=True)[1]]
    src, dst = edge_index.numpy()
    # (target node, in-neighbour's class) pairs with multiplicity, sorted by node then class
    keys, mult = np.unique(dst * len(seen) + id1[src], return_counts=True)
    pairs = np.stack([keys // len(seen), keys % len(seen)], 1)
    starts = np.searchsorted(pairs[:, 0], np.arange(n + 1))
    signature = np.stack([pairs[:, 1], mult], 1)
    classes: dict[tuple[int, bytes], int] = {}
    id2 = np.array([classes.setdefault((int(id1[i]), signature[starts[i]:starts[i + 1]].tobytes()),
                                       len(classes)) for i in range(n)], dtype=np.int64)
    first = np.unique(id2, return_index=True)[1]  # one representative node per class
    lo, hi = starts[first], starts[first + 1]
    size = hi - lo
    sel = np.repeat(lo - np.cumsum(size) + size, size) + np.arange(size.sum())  # pairs of first
    degree = np.repeat(np.bincount(dst, minlength=n)[first], size)  # in-degree, with repeats
    f = x.size(1)
    return {"u_x": torch.from_numpy(np.ascontiguousarray(rows[:, :f])).to(x.dtype),
            "u_agg": torch.from_numpy(np.ascontiguousarray(rows[:, f:])).to(x.dtype),
            "u_root": torch.from_numpy(id1[first]),
            "u_count": torch.from_numpy(np.bincount(id2).astype(np.float32)),
            "u_src": torch.from_numpy(pairs[sel, 1].astype(np.int64)),
            "u_dst": torch.from_numpy(np.repeat(np.arange(len(first)), size)),
            "u_weight": torch.from_numpy((mult[sel] / np.maximum(degree, 1)).astype(np.float32))}


@dataclass
class ClassBatch:
    """The classes of several graphs, concatenated (indices offset per graph).

    ``graph`` maps each second-layer class to its graph in the batch; the other fields are the
    ``u_`` fields of :mod:`trappm_ray.model.node_classes` without the prefix.
    """

    x: Tensor
    agg: Tensor
    root: Tensor
    count: Tensor
    src: Tensor
    dst: Tensor
    weight: Tensor
    graph: Tensor
    num_graphs: int

    @classmethod
    def collate(cls, graphs) -> "ClassBatch":
        """Concatenate the ``u_`` fields of ``graphs`` (PyG ``Data`` objects)."""
        u1 = np.cumsum([0] + [g.u_x.size(0) for g in graphs])
        u2 = np.cumsum([0] + [g.u_root.size(0) for g in graphs])
        cat = lambda key, offsets=None: torch.cat(  # noqa: E731
            [g[key] + (0 if offsets is None else int(offsets[i])) for i, g in enumerate(graphs)])
        return cls(x=cat("u_x"), agg=cat("u_agg"), root=cat("u_root", u1), count=cat("u_count"),
                   src=cat("u_src", u1), dst=cat("u_dst", u2), weight=cat("u_weight"),
                   graph=torch.repeat_interleave(torch.arange(len(graphs)),
                                                 torch.from_numpy(np.diff(u2))),
                   num_graphs=len(graphs))


__all__ = ["CLASS_KEYS", "CLASS_LEVELS", "node_classes", "ClassBatch"]
