"""A featurized graph at another batch size, by per-batch arithmetic instead of a new featurize.

A prediction on a GPU needs its graph at two or three batch sizes (the one asked, the batch
where the device's labels are, the batch envelope's rungs); featurizing again costs as much as
the first time (shape inference and the cost pass). In most graphs every tensor either carries
the batch in one dimension (its element count, bytes and the node's MACs proportional to the
batch) or does not depend on it at all (weights, most shape arithmetic), and the graph at batch
``a`` follows from the one at ``b`` by scaling the first part by ``a / b``.

:func:`batch_terms` splits one featurized graph so, on the proof of
:mod:`trappm_ray.graph.batch_axes` (which axis of each tensor carries the batch); it gives up
(None) where that proof fails and for a file exported with a fixed batch. :func:`at_batch`
then costs a few vector operations; where it gives up the caller featurizes.
``tests/graph/test_rebatch.py`` checks the result equals a fresh featurize on every model it
accepts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from trappm_ray.graph.batch_axes import BatchAxes, Refused
from trappm_ray.graph.featurize import DTYPE_BYTES, SHAPE_SLOTS, Graph, memory_estimate


@dataclass(frozen=True)
class BatchTerms:
    """A graph's per-node quantities split into the part proportional to the batch and the rest.

    Attributes:
        batch: the batch the graph was featurized at.
        macs, out_bytes, out_elems, in_elems: ``[N]`` parts proportional to the batch (the rest
            is the graph's value minus these).
        in_slot, out_slot: ``[N]`` the slot of ``in_shape`` / ``out_shape`` that carries the
            batch (-1: none).
        input_bytes: bytes of the data inputs (all proportional).
    """

    batch: int
    macs: np.ndarray
    out_bytes: np.ndarray
    out_elems: np.ndarray
    in_elems: np.ndarray
    in_slot: np.ndarray
    out_slot: np.ndarray
    input_bytes: float


def _slot(axis: int, rank: int) -> int:
    """The ``[N, 6]`` shape slot that holds ``axis`` of a tensor of ``rank`` (featurize folds the
    leading dimensions of a tensor above 6-D into slot 0)."""
    return max(0, axis - max(rank - SHAPE_SLOTS, 0))


def batch_terms(graph: Graph) -> BatchTerms | None:
    """The split of ``graph`` into batch-proportional and fixed parts, or None where it is not
    proven (module docstring). Kept in ``graph.derived``; needs the featurize that made it."""
    if "batch_terms" in graph.derived:
        return graph.derived["batch_terms"]
    m = graph.derived.get("inferred")
    b0 = int(graph.static.get("batch_size") or 0)
    terms = None
    if m is not None and b0 >= 1 and graph.meta.get("exported_batch") is None:
        try:
            terms = _terms(graph, m, b0)
        except (Refused, LookupError, ValueError, TypeError, ArithmeticError):
            terms = None  # not proven (the proof's own slip on a malformed graph included): featurize
    graph.derived["batch_terms"] = terms
    return terms


def _terms(graph: Graph, m, b0: int) -> BatchTerms:
    walk = BatchAxes(m, b0)
    weights, folded, numel = graph.derived["weights"], graph.derived["folded"], graph.derived["numel"]
    nodes = m.model.graph.node
    n = len(nodes)
    ielems = np.zeros(n)
    carries = np.zeros(n, bool)  # every output carries the batch: the node's outputs and MACs scale
    in_slot, out_slot = np.full(n, -1), np.full(n, -1)
    axis = walk.axis
    for i, node in enumerate(nodes):
        if i in folded:
            continue
        inputs, outputs = list(node.input), [x for x in node.output if x]
        walk.visit(node, inputs, outputs)
        data_in = [x for x in inputs if x and x not in weights]
        ielems[i] = sum(numel[x] for x in data_in if x in axis and x in numel)
        if any(x in axis for x in outputs):
            if not all(x in axis for x in outputs):
                raise Refused  # some outputs scale, others not: not followed
            carries[i] = True
            out_slot[i] = _slot(axis[outputs[0]], walk.rank(outputs[0]))
        first = data_in[0] if data_in else (inputs[0] if inputs else "")
        if first in axis:
            in_slot[i] = _slot(axis[first], walk.rank(first))
    # a carrying node's outputs all scale: its whole output count, bytes and MACs (featurize's)
    macs, obytes, oelems = (np.where(carries, v, 0.0) for v in (graph.macs, graph.out_bytes, graph.out_elems))
    input_bytes = sum(float(math.prod(m.shapes[x])) * DTYPE_BYTES.get(m.dtypes.get(x, 1), 4)
                      for x in m.data_inputs if x in m.shapes)
    return BatchTerms(b0, macs, obytes, oelems, ielems, in_slot, out_slot, input_bytes)


def at_batch(graph: Graph, batch: int) -> Graph | None:
    """``graph`` at ``batch`` by arithmetic (module docstring); None where :func:`batch_terms`
    cannot prove it, and the caller featurizes."""
    t = batch_terms(graph)
    if t is None or batch < 1:
        return None
    if batch == t.batch:
        return graph
    r = batch / t.batch
    macs, obytes, oelems, ielems = (getattr(graph, k) + getattr(t, k) * (r - 1)
                                    for k in ("macs", "out_bytes", "out_elems", "in_elems"))
    in_shape, out_shape = graph.in_shape.copy(), graph.out_shape.copy()
    for shape, slot in ((in_shape, t.in_slot), (out_shape, t.out_slot)):
        rows = np.flatnonzero(slot >= 0)
        shape[rows, slot[rows]] = shape[rows, slot[rows]] // t.batch * batch
    static = {**graph.static, "batch_size": batch, "macs": float(macs.sum()), "activation_bytes": float(obytes.sum()),
              "train_memory_estimate_bytes": memory_estimate(graph.ops, obytes, graph.static["weight_bytes"],
                                                             t.input_bytes * r)}
    out = replace(graph, macs=macs, out_bytes=obytes, out_elems=oelems, in_elems=ielems, in_shape=in_shape,
                  out_shape=out_shape, static=static, meta=dict(graph.meta), derived={})
    out.derived.update({"node_names": graph.derived.get("node_names"),
                        "batch_terms": replace(t, batch=batch, **{k: getattr(t, k) * r for k in
                                                                  ("macs", "out_bytes", "out_elems", "in_elems")},
                                               input_bytes=t.input_bytes * r)})
    return out


__all__ = ["BatchTerms", "batch_terms", "at_batch"]
