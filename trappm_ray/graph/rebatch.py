"""A featurized graph at another batch size, by per-batch arithmetic instead of a new featurize.

A prediction on a GPU needs its graph at two or three batch sizes (the one asked, the batch
where the device's labels are, the batch envelope's rungs); featurizing again costs as much as
the first time (shape inference and the cost pass). For most graphs every tensor either carries
the batch in its first dimension (its element count, bytes and the node's MACs are proportional
to the batch) or does not depend on it at all (weights, shape arithmetic), and the graph at
batch ``a`` follows from the one at ``b`` by scaling the first part by ``a / b``.

:func:`batch_terms` proves that split for one featurized graph, tensor by tensor in graph
order, and gives up (None) wherever it cannot: a file exported with a fixed batch, a featurize
at batch 1 (every dimension is a multiple of 1, so nothing can be checked), an operator that may
move or reduce the batch axis (a transpose off axis 0, a gather, slice, reduction or concat
along it, recurrent cells, einsum), a shape computed from the batch feeding anything but a
``Reshape``, or a batch-carrying tensor whose first dimension is no multiple of the batch.
:func:`at_batch` then costs a few vector operations; where it gives up the caller featurizes.
``tests/graph/test_rebatch.py`` checks the result equals a fresh featurize on every model it
accepts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import onnx
from onnx import helper

from trappm_ray.graph.featurize import DTYPE_BYTES, VIEW_OPS, Graph
from trappm_ray.graph.rebind import constant_targets
from trappm_ray.graph.shape_rules import BROADCAST, SAME_SHAPE

# Ops whose output keeps the batch as the first dimension of a batch-carrying first input,
# whatever their attributes (elementwise, windows over the spatial axes, matrix products on the
# last two axes; checked further in _carries).
KEEPS_BATCH = SAME_SHAPE | BROADCAST | {
    "Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool",
    "GlobalMaxPool", "GlobalLpPool", "Gemm", "MatMul", "Reshape", "Flatten", "Transpose", "Concat",
    "Split", "Slice", "Gather", "Unsqueeze", "Squeeze", "ReduceMean", "ReduceSum", "ReduceMax",
    "ReduceMin", "ReduceProd", "ReduceL2", "Expand", "DepthToSpace", "SpaceToDepth"}
AXIS_OPS = {"Concat", "Split", "Gather", "Flatten"}  # refused along axis 0 (their default, but Flatten's and Concat's)
ATTR_OPS = AXIS_OPS | {"Transpose", "Gemm", "Slice", "Squeeze", "Unsqueeze", "ReduceMean", "ReduceSum", "ReduceMax",
                       "ReduceMin", "ReduceProd", "ReduceL2"}  # whose attributes _carries reads


@dataclass(frozen=True)
class BatchTerms:
    """A graph's per-node quantities split into the part proportional to the batch and the rest.

    Attributes:
        batch: the batch the graph was featurized at.
        macs, out_bytes, out_elems, in_elems: ``[N]`` parts proportional to the batch (the rest
            is the graph's value minus these).
        in_first, out_first: ``[N]`` True where the first data input / first output carries the
            batch in its first dimension (slot 0 of ``in_shape`` / ``out_shape``).
        input_bytes: bytes of the data inputs (all proportional).
    """

    batch: int
    macs: np.ndarray
    out_bytes: np.ndarray
    out_elems: np.ndarray
    in_elems: np.ndarray
    in_first: np.ndarray
    out_first: np.ndarray
    input_bytes: float


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _axes(node: onnx.NodeProto, a: dict, consts: dict, rank: int, index: int) -> list[int] | None:
    """The node's ``axes`` (attribute, or a constant input at ``index``), normalized; None: unknown."""
    axes = a.get("axes")
    if axes is None and len(node.input) > index and node.input[index]:
        found = consts.get(node.input[index])
        axes = None if found is None else found.tolist()
    return None if axes is None else [int(x) % max(rank, 1) for x in axes]


def _carries(node: onnx.NodeProto, consts: dict, shapes: dict, scaled: list[bool]) -> bool:
    """Whether ``node`` (some data input of which carries the batch) keeps it in axis 0 of its
    outputs in proportion; False where that is not proven."""
    op, ins = node.op_type, list(node.input)
    a = _attrs(node) if node.attribute and op in ATTR_OPS else {}
    rank = len(shapes.get(ins[0], ())) if ins and ins[0] else 0
    out_rank = len(shapes.get(node.output[0], ())) if node.output else 0
    if node.domain not in ("", "ai.onnx") or op not in KEEPS_BATCH:
        return False
    if op in BROADCAST:  # a batch-carrying input broadcast into a higher rank would leave axis 0
        return all(len(shapes.get(x, ())) == out_rank for x, s in zip(ins, scaled) if s)
    if op == "BatchNormalization" and len(node.output) > 1:  # training mode: running statistics out
        return False
    if op == "Gather" and all(scaled[:2]):
        return False
    if op in AXIS_OPS and int(a.get("axis", 1 if op in ("Flatten", "Concat") else 0)) % max(rank, 1) == 0:
        return op == "Gather" and not scaled[0]  # an embedding lookup: batch-carrying indices
    if op == "Concat" and not all(scaled):
        return False
    if op == "Transpose":
        perm = a.get("perm")
        return perm is not None and int(perm[0]) == 0
    if op == "Gemm":
        return scaled[0] and not any(scaled[1:]) and not a.get("transA")
    if op == "MatMul":  # a batch axis a product contracts over is no batch axis
        if len(scaled) > 1 and scaled[1]:
            return all(len(shapes.get(x, ())) >= 3 for x in ins[:2])
        return rank >= 2
    if op in ("Conv", "ConvTranspose"):
        return scaled[0] and not any(scaled[1:])
    if op in ("Slice", "Squeeze", "Unsqueeze") or op.startswith("Reduce"):
        index = 3 if op == "Slice" else 1
        axes = _axes(node, a, consts, out_rank if op == "Unsqueeze" else rank, index)
        return axes is not None and 0 not in axes and (op != "Slice" or not any(scaled[1:]))
    if op == "Expand":
        return scaled[0]
    return True


def batch_terms(graph: Graph) -> BatchTerms | None:
    """The split of ``graph`` into batch-proportional and fixed parts, or None where it is not
    proven (module docstring). Kept in ``graph.derived``; needs the featurize that made it."""
    if "batch_terms" in graph.derived:
        return graph.derived["batch_terms"]
    m = graph.derived.get("inferred")
    b0 = int(graph.static.get("batch_size") or 0)
    terms = None if m is None or b0 < 2 or graph.meta.get("exported_batch") is not None else _split(graph, m, b0)
    graph.derived["batch_terms"] = terms
    return terms


def _split(graph: Graph, m, b0: int) -> BatchTerms | None:
    nodes, shapes, dtypes = m.model.graph.node, m.shapes, m.dtypes
    weights, folded, numel = graph.derived["weights"], graph.derived["folded"], graph.derived["numel"]
    consts = constant_targets(m.model)
    scale = {x: True for x in m.data_inputs}  # tensor -> carries the batch in axis 0
    vdep: set[str] = set()  # integer tensors whose values depend on the batch (shapes)
    n = len(nodes)
    macs, obytes, oelems, ielems = (np.zeros(n) for _ in range(4))
    in_first, out_first = np.zeros(n, bool), np.zeros(n, bool)
    for i, node in enumerate(nodes):
        inputs, outputs = list(node.input), [x for x in node.output if x]
        scaled = [bool(x) and scale.get(x, False) for x in inputs]
        if any(x in vdep for x in inputs[1:] if x) and node.op_type != "Reshape" and not (
                inputs[0] in vdep and not any(scaled)):
            return None  # a shape computed from the batch decides this node's output shape
        shape_of = node.op_type in ("Shape", "Size") and any(scaled)
        if shape_of or (any(x in vdep for x in inputs if x) and not any(scaled)):
            vdep.update(outputs)  # the batch as a value, and shape arithmetic on it
        carries = any(scaled) and i not in folded and not shape_of
        if carries and not _carries(node, consts, shapes, scaled):
            return None
        for x in outputs:
            scale[x] = carries
            s = shapes.get(x)
            if carries and (not s or s[0] % b0):
                return None
        data_in = [x for x in inputs if x and x not in weights]
        if any(scaled):
            ielems[i] = sum(numel[x] for x in data_in if scale.get(x) and x in numel)
        if carries:
            oelems[i] = sum(numel[x] for x in outputs if x in numel)
            obytes[i] = sum(numel[x] * DTYPE_BYTES.get(dtypes.get(x, 1), 4) for x in outputs if x in numel)
            macs[i] = graph.macs[i]
        first = data_in[0] if data_in else (inputs[0] if inputs else "")
        in_first[i], out_first[i] = bool(first) and scale.get(first, False), bool(outputs) and scale[outputs[0]]
    input_bytes = sum(float(math.prod(shapes[x])) * DTYPE_BYTES.get(dtypes.get(x, 1), 4)
                      for x in m.data_inputs if x in shapes)
    return BatchTerms(b0, macs, obytes, oelems, ielems, in_first, out_first, input_bytes)


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
    in_shape[t.in_first, 0] = in_shape[t.in_first, 0] // t.batch * batch
    out_shape[t.out_first, 0] = out_shape[t.out_first, 0] // t.batch * batch
    kept = float(sum(b for op, b in zip(graph.ops, obytes) if op not in VIEW_OPS))
    static = {**graph.static, "batch_size": batch, "macs": float(macs.sum()), "activation_bytes": float(obytes.sum()),
              "train_memory_estimate_bytes": 4 * graph.static["weight_bytes"] + t.input_bytes * r + kept}
    out = replace(graph, macs=macs, out_bytes=obytes, out_elems=oelems, in_elems=ielems, in_shape=in_shape,
                  out_shape=out_shape, static=static, meta=dict(graph.meta), derived={})
    out.derived.update({"node_names": graph.derived.get("node_names"),
                        "batch_terms": replace(t, batch=batch, **{k: getattr(t, k) * r for k in
                                                                  ("macs", "out_bytes", "out_elems", "in_elems")},
                                               input_bytes=t.input_bytes * r)})
    return out


__all__ = ["BatchTerms", "KEEPS_BATCH", "batch_terms", "at_batch"]
