"""ONNX model -> operator graph with per-node costs, in one linear pass.

Nodes are operators, edges are tensors flowing from producer to consumer. For each node the pass
computes multiply-accumulates (MACs), parameters, weight bytes, output (activation) bytes and a
summary of its input/output shapes. Feature matrices for a given feature set are derived from
this raw graph by :mod:`trappm_ray.graph.features`, so one stored graph serves every feature set.
"""
from __future__ import annotations

import functools
import json
import math
import os
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

from trappm_ray import errors
from trappm_ray.graph.onnx_io import Limits, check_model, fixed_size, infer, read_model
from trappm_ray.graph.weights import INDEX_DTYPES, find_weights

SHAPE_SLOTS = 6
TOKEN_DTYPES = (onnx.TensorProto.INT32, onnx.TensorProto.INT64)  # a 2-D input of these holds token ids
INT_CAP = 2**62  # hostile attributes and dims are clipped here so int64 arrays cannot overflow
# Ops whose output is a view or a pure re-labelling in the training framework: they move no data
# worth keeping for backward and cost (almost) no arithmetic.
VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Size", "Constant",
            "ConstantOfShape", "Transpose", "Expand", "Slice", "Gather", "Concat", "Cast",
            "Split", "Range", "Dropout"}
# Arithmetic per output element for the non-linear ops (rough, as in FLOP counters).
ELEMENT_COST = {"Softmax": 5, "LogSoftmax": 5, "LayerNormalization": 8, "BatchNormalization": 2,
                "InstanceNormalization": 8, "GroupNormalization": 8, "Erf": 4, "Gelu": 8,
                "Sigmoid": 4, "Tanh": 4, "HardSwish": 3, "HardSigmoid": 3, "Swish": 5, "Mish": 6,
                "Exp": 2, "Log": 2, "Pow": 2, "Sqrt": 2, "Div": 1, "Reciprocal": 1,
                "RMSNormalization": 6, "Softplus": 3, "Elu": 3, "Selu": 3, "Clip": 1}
RNN_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DTYPE_BYTES = {onnx.TensorProto.BOOL: 1, onnx.TensorProto.INT8: 1, onnx.TensorProto.UINT8: 1,
               onnx.TensorProto.FLOAT16: 2, onnx.TensorProto.BFLOAT16: 2,
               onnx.TensorProto.INT16: 2, onnx.TensorProto.FLOAT: 4, onnx.TensorProto.INT32: 4,
               onnx.TensorProto.INT64: 8, onnx.TensorProto.DOUBLE: 8}


@dataclass
class Graph:
    """An operator graph with raw per-node quantities (one row per node in every array).

    Attributes:
        ops: operator names (``domain:Op`` for non-standard domains).
        edge_index: ``[2, E]`` producer -> consumer node indices (forward edges only).
        macs, params, weight_bytes, out_bytes: per-node costs.
        in_shape, out_shape: ``[N, 6]`` first data input / first output shape; tensors above 6-D
            fold their leading dimensions into the first slot so the element count is kept.
        n_in, n_out, in_elems, out_elems: counts and total elements of all inputs / outputs.
        attrs: ``[N, 3]`` kernel size (product), stride (product), groups.
        static: graph totals and settings (batch size, resolution, ...).
        meta: provenance and diagnostics (opset, producer, unresolved shapes, ...).
        derived: what later stages compute from the arrays once per graph (the memory model's
            walk), kept here so that one prediction's many passes share it; never stored.
    """

    ops: list[str]
    edge_index: np.ndarray
    macs: np.ndarray
    params: np.ndarray
    weight_bytes: np.ndarray
    out_bytes: np.ndarray
    in_shape: np.ndarray
    out_shape: np.ndarray
    n_in: np.ndarray
    n_out: np.ndarray
    in_elems: np.ndarray
    out_elems: np.ndarray
    attrs: np.ndarray
    static: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    derived: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_nodes(self) -> int:
        return len(self.ops)

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    def summary(self) -> dict:
        """Totals as plain JSON types."""
        return {"nodes": self.num_nodes, "edges": self.num_edges,
                **{k: (int(v) if float(v).is_integer() else float(v)) for k, v in self.static.items()}}


def _fold6(shape: tuple[int, ...] | None) -> list[int]:
    if not shape:
        return [0] * SHAPE_SLOTS
    s = list(shape)
    if len(s) > SHAPE_SLOTS:  # keep the element count: fold the leading dims together
        s = [int(math.prod(s[: len(s) - SHAPE_SLOTS + 1]))] + s[len(s) - SHAPE_SLOTS + 1:]
    return s + [0] * (SHAPE_SLOTS - len(s))


@functools.lru_cache(maxsize=1)
def largest_device() -> tuple[str, float]:
    """(name, bytes) of the device with the most memory in the spec table."""
    from trappm_ray import devices

    spec = max(devices.load_specs().values(), key=lambda s: s.memory_gb or 0.0)
    return spec.name, float(spec.memory_gb or 0.0) * 1e9


def _checked_numel(name: str, shape: tuple[int, ...]) -> int:
    """Element count; a tensor with more elements than the largest device in the spec table
    has bytes of memory (even at one byte each) is no model a device could run: refused, so a
    few hundred bytes of shape arithmetic cannot ask for a petabyte and get a number back."""
    n = math.prod(shape)
    device, capacity = largest_device()
    if n > INT_CAP or any(d > INT_CAP for d in shape) or n > capacity:
        raise errors.TooLarge(f"tensor '{name}' of shape {list(shape)[:8]} has about "
                              f"1e{len(str(n)) - 1} elements, more than the largest device in the "
                              f"spec table ({device}, {capacity / 1e9:.0f} GB) holds")
    return n


def topological_order(nodes) -> list[int]:
    """Kahn's algorithm over tensor names; raises :class:`CycleError` if the graph is not a DAG."""
    producer = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            if o:
                producer[o] = i
    indeg = [0] * len(nodes)
    consumers: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        for x in set(n.input):
            j = producer.get(x)
            if j is not None and j != i:
                indeg[i] += 1
                consumers[j].append(i)
            elif j == i:
                raise errors.CycleError(f"node '{n.name or n.op_type}' consumes its own output")
    queue = deque(i for i, d in enumerate(indeg) if d == 0)
    order = []
    while queue:
        i = queue.popleft()
        order.append(i)
        for j in consumers[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                queue.append(j)
    if len(order) != len(nodes):
        stuck = next(nodes[i] for i, d in enumerate(indeg) if d > 0)
        raise errors.CycleError(f"graph has a cycle through node '{stuck.name or stuck.op_type}'")
    return order


# Ops whose output depends on an input's shape (or type) but never on its values.
SHAPE_ONLY_OPS = {"Shape", "Size", "EyeLike", "RandomNormalLike", "RandomUniformLike"}


def check_data_path(model: onnx.ModelProto) -> None:
    """Refuse a graph in which no output depends on the values of a data input.

    Values flow from the graph inputs that are not initializers through every op except
    :data:`SHAPE_ONLY_OPS`; nodes with sub-graphs pass values on conservatively. The model's
    nodes must be in topological order (``featurize`` sorts them first).

    Raises:
        errors.NoDataPath: every output is shape arithmetic or a constant.
    """
    g = model.graph
    inits = {t.name for t in g.initializer}
    carries = {i.name for i in g.input if i.name not in inits}
    for n in g.node:
        if n.op_type in SHAPE_ONLY_OPS and n.domain in ("", "ai.onnx"):
            continue
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute) \
                or carries.intersection(n.input):
            carries.update(o for o in n.output if o)
    if not any(o.name in carries for o in g.output):
        raise errors.NoDataPath("no graph output depends on the values of an input (only on "
                                "shapes or constants): there is nothing to train or run")


def _macs(op: str, a: dict, ins: list, outs: list, out_numel: int) -> float:
    """Multiply-accumulates of one node from its input/output shapes."""
    x = ins[0] if ins else None
    w = ins[1] if len(ins) > 1 else None
    # An omitted optional bias is an empty input name, whose shape is None: no bias MACs then
    # (``len(ins) > 2`` alone counted a bias for ``Conv(x, W, "")`` / ``Gemm(A, B, "")``).
    has_bias = len(ins) > 2 and ins[2] is not None
    if op == "Conv" and w:
        return out_numel * float(math.prod(w[1:])) + (out_numel if has_bias else 0)
    if op == "ConvTranspose" and x and w:
        return float(math.prod(x)) * float(math.prod(w[1:]))
    if op == "Gemm" and x and w:
        k = x[0] if a.get("transA") else x[-1]
        return out_numel * k + (out_numel if has_bias else 0)
    if op in ("MatMul", "MatMulInteger", "QLinearMatMul") and x:
        return out_numel * x[-1]
    if op == "Einsum" and ins and all(s is not None for s in ins):
        eq = a["equation"].decode() if isinstance(a["equation"], bytes) else a["equation"]
        eq = eq.replace(" ", "")
        lhs = eq.split("->")[0].split(",")
        size = {c: d for term, s in zip(lhs, ins) for c, d in zip(term[-len(s):] if s else "", s)}
        out_letters = eq.split("->")[1] if "->" in eq else ""
        contracted = [size[c] for c in size if c not in out_letters and c.isalpha()]
        return out_numel * float(math.prod(contracted))
    if op in RNN_GATES and x and w and len(ins) > 2 and ins[2]:
        dirs, gh, inp = w
        return dirs * x[0] * x[1] * gh * (inp + ins[2][-1])
    if op == "Col2Im" and x:  # fold (nn.Fold): each column element is added into the image once
        return float(math.prod(x))
    if op in ("MaxPool", "AveragePool", "LpPool"):
        return out_numel * float(math.prod(a.get("kernel_shape", [1])))
    if op.startswith(("Global", "Reduce")) and x:
        return float(math.prod(x))
    if op in VIEW_OPS:
        return 0.0
    return out_numel * ELEMENT_COST.get(op, 1)


def token_ids_input(m) -> bool:
    """Whether the first data input of the inferred model ``m`` holds token ids (2-D integers:
    batch x sequence): a text model."""
    first = m.data_inputs[0] if m.data_inputs else None
    return first is not None and len(m.shapes.get(first, ())) == 2 and m.dtypes.get(first) in TOKEN_DTYPES


TIED_WEIGHTS_KEY = "trappm.tied_weights"


def tied_weights(model: onnx.ModelProto) -> set[str]:
    """Weights the file's metadata names as copies of another parameter (the corpus exporter of
    transformers models writes them: a head tied to the input embedding); a malformed entry
    names none."""
    for prop in model.metadata_props:
        if prop.key == TIED_WEIGHTS_KEY:
            try:
                names = json.loads(prop.value)
            except ValueError:
                return set()
            return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()
    return set()


def memory_estimate(ops: list[str], out_bytes, weight_bytes: float, input_bytes: float) -> float:
    """The static training-memory estimate: weights + gradients + Adam's two moments (fp32), the
    input and every output but a view's, kept for backward."""
    return 4 * weight_bytes + input_bytes + float(sum(b for op, b in zip(ops, out_bytes) if op not in VIEW_OPS))


def build_graph(m, batch_size: int, resolution: int | None) -> Graph:
    """The linear pass over an inferred model (see :func:`featurize`)."""
    nodes = m.model.graph.node  # in topological order (featurize sorts them)
    shapes, dtypes = m.shapes, m.dtypes
    # weights wherever they come from; `folded` nodes only compute weights (see weights.py)
    weights, folded = find_weights(nodes, shapes, dtypes, set(m.weights))
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    tied = tied_weights(m.model)
    N = len(nodes)
    numel = {k: float(_checked_numel(k, v)) for k, v in shapes.items()}
    # Per-node values go to Python lists first: element writes into numpy arrays cost more
    # than the arithmetic itself on graphs of thousands of nodes.
    macs, params, wbytes, obytes, in_elems, out_elems = ([0.0] * N for _ in range(6))
    in_shape, out_shape, n_in, n_out, attrs = [], [], [], [], []
    src, dst, counted, ops = [], [], set(), []
    for i, n in enumerate(nodes):
        op, inputs, outputs = n.op_type, list(n.input), [x for x in n.output if x]
        ops.append(op if n.domain in ("", "ai.onnx") else f"{n.domain}:{op}")
        a = {x.name: helper.get_attribute_value(x) for x in n.attribute} if n.attribute else {}
        ins = [shapes.get(x) if x else None for x in inputs]
        outs = [shapes.get(x) for x in outputs]
        data_in = [s for x, s in zip(inputs, ins) if x and x not in weights]
        for x in dict.fromkeys(inputs):
            if not x:
                continue
            if x not in weights:
                j = producer.get(x)
                if j is not None:
                    src.append(j)
                    dst.append(i)
            elif x not in counted and i not in folded:  # counted where the weight is used
                counted.add(x)
                if x in tied:  # a copy of another parameter (a head tied to the embedding)
                    continue
                dtype = dtypes.get(x, onnx.TensorProto.FLOAT)
                if dtype not in INDEX_DTYPES:  # index buffers and shape constants aren't params
                    params[i] += numel.get(x, 0.0)
                wbytes[i] += numel.get(x, 0.0) * DTYPE_BYTES.get(dtype, 4)
        out_numel = numel.get(outputs[0], 0.0) if outputs else 0.0
        if i not in folded:  # a folded node's output is a weight (in weight_bytes), not data
            obytes[i] = sum(numel[x] * DTYPE_BYTES.get(dtypes.get(x, 1), 4)
                            for x in outputs if x in numel)
        in_shape.append(_fold6(data_in[0] if data_in else (ins[0] if ins else None)))
        out_shape.append(_fold6(outs[0] if outs else None))
        n_in.append(sum(1 for x in inputs if x))
        n_out.append(len(outs))
        in_elems[i] = sum(float(math.prod(s)) for s in data_in if s is not None)
        out_elems[i] = sum(numel.get(x, 0.0) for x in outputs)
        kernel = stride = group = 1
        try:
            macs[i] = 0.0 if i in folded else _macs(op, a, ins, outs, out_numel)
            if "kernel_shape" in a:
                kernel = int(math.prod(a["kernel_shape"]))
            elif op in ("Conv", "ConvTranspose") and len(ins) > 1 and ins[1]:
                kernel = int(math.prod(ins[1][2:]))
            if "strides" in a:
                stride = int(math.prod(a["strides"]))
            group = int(a.get("group", 1))
        except (ValueError, TypeError, KeyError, IndexError, OverflowError) as e:
            raise errors.UnsupportedConstruct(  # attributes of the wrong type or rank
                f"cannot cost node '{n.name or op}' ({op}): {e}") from None
        attrs.append(tuple(min(max(v, -INT_CAP), INT_CAP) for v in (kernel, stride, group)))
    macs, params, wbytes, obytes, in_elems, out_elems = (
        np.array(v, np.float64) for v in (macs, params, wbytes, obytes, in_elems, out_elems))
    in_shape, out_shape = (np.array(s, np.int64).reshape(N, SHAPE_SLOTS) for s in (in_shape, out_shape))
    n_in, n_out = np.array(n_in, np.int32), np.array(n_out, np.int32)
    attrs = np.array(attrs, np.int64).reshape(N, 3)
    edge_index = np.unique(np.array([src, dst], np.int64).reshape(2, -1), axis=1).astype(np.int32)

    input_bytes = sum(float(math.prod(shapes[x])) * DTYPE_BYTES.get(dtypes.get(x, 1), 4)
                      for x in m.data_inputs if x in shapes)
    p, wb = float(params.sum()), float(wbytes.sum())
    first = tuple(shapes.get(m.data_inputs[0], ())) if m.data_inputs else ()
    if resolution is None:  # the spatial size of an image-like first input; of token ids, their
        # sequence length (the corpus keys text models by it, so predictors were trained on it)
        resolution = first[-1] if len(first) == 4 or token_ids_input(m) else 0
    elif (refusal := fixed_size(m.data_inputs[0], first, resolution)) is not None:  # the graph's work is not at it
        raise refusal
    static = {
        "batch_size": batch_size, "resolution": resolution,
        "nodes": N, "edges": int(edge_index.shape[1]), "macs": float(macs.sum()), "params": p,
        "weight_bytes": wb, "activation_bytes": float(obytes.sum()),
        "train_memory_estimate_bytes": memory_estimate(ops, obytes, wb, input_bytes)}
    graph = Graph(ops, edge_index, macs, params, wbytes, obytes, in_shape, out_shape, n_in, n_out,
                  in_elems, out_elems, attrs, static)
    # names for a per-layer breakdown, what graph.rebatch re-reads; never stored
    graph.derived.update(node_names=[n.name for n in nodes], weights=weights, folded=folded, numel=numel, inferred=m)
    return graph


def featurize(src: str | os.PathLike | bytes | onnx.ModelProto, batch_size: int | None = 1,
              resolution: int | None = None, dims: dict[str, int] | None = None,
              limits: Limits = Limits()) -> Graph:
    """Turn an ONNX model into a :class:`Graph` at a given batch size.

    Args:
        src: path, bytes, or a parsed model (which is copied, never modified).
        batch_size: the value bound to every data input's first dimension; None keeps the
            batch the file was exported with (1 for a dynamic batch axis). A file exported at
            a fixed batch is re-bound to another one where that is sound
            (``meta["batch_rebound"]``), and refused with :class:`errors.FixedBatch` where not.
        resolution: bound to symbolic spatial dimensions (dims 2.. of a data input).
        dims: values for other named symbolic dimensions, e.g. ``{"seq": 128}``.
        limits: caps on file size, node count, folded values, time and unresolved shapes.

    Raises:
        errors.ModelError: a subclass naming what is wrong with the input.
    """
    if batch_size is not None and batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    deadline = time.monotonic() + limits.max_seconds
    if isinstance(src, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(src)
    else:
        model = read_model(src, limits)
    check_model(model, limits)  # read_model's checks, also for a ModelProto passed in
    # Shape inference and the cost pass walk nodes in file order, which ONNX requires to be
    # topological but exporters do not always honour; sorting also refuses cycles.
    nodes = model.graph.node
    order = topological_order(nodes)
    if order != list(range(len(nodes))):
        ordered = [onnx.NodeProto() for _ in nodes]
        for copy, i in zip(ordered, order):
            copy.CopyFrom(nodes[i])
        del nodes[:]
        nodes.extend(ordered)
    check_data_path(model)  # before shape inference: shape bombs have no data path
    inferred = infer(model, batch_size, resolution, dims, limits, deadline)
    if time.monotonic() > deadline:
        raise errors.TooSlow(f"featurizing took over {limits.max_seconds:g} s (shape inference)")
    graph = build_graph(inferred, inferred.batch_size, resolution)
    graph.meta = {
        "opset": max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                     default=0),
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "data_inputs": inferred.data_inputs,
        "token_ids": token_ids_input(inferred),
        "unresolved_shapes": len(inferred.unresolved),
        "external_data": inferred.external_data,
        # a fixed-batch file featurized at another batch: its shape targets were re-bound
        "exported_batch": inferred.exported_batch,
        "batch_rebound": inferred.exported_batch not in (None, inferred.batch_size),
        "rebound_targets": len(inferred.rebound),
    }
    return graph
