"""Safe loading and shape inference of untrusted ONNX models.

The loader never reads external-data files: the featurizer needs tensor shapes, not values, and
shapes live in the protobuf itself. Inputs are bound to a concrete batch size (and resolution),
then ONNX shape inference runs; shape sub-graphs that ONNX's data propagation cannot follow
(the legacy exporter's padding arithmetic, for instance) are evaluated with numpy and inference
runs once more.
"""
from __future__ import annotations

import io
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from trappm_ray import errors
from trappm_ray.graph import rebind, safe_infer, wire
from trappm_ray.graph.shape_fold import MAX_ELEMENTS, resolve_shapes

log = logging.getLogger(__name__)
MAX_FILE_BYTES = 2**31 - 1  # protobuf cannot parse a message of 2 GiB or more
MAX_NODES = 200_000
CONTROL_FLOW = {"If", "Loop", "Scan", "SequenceMap"}


@dataclass
class Limits:
    """Caps applied to untrusted input."""

    max_file_bytes: int = MAX_FILE_BYTES
    max_nodes: int = MAX_NODES
    # above this fraction of node outputs with unknown shapes the features would be mostly blank
    max_unresolved_fraction: float = 0.05
    # no value above this many elements is computed while folding shape arithmetic
    max_fold_elements: int = MAX_ELEMENTS
    # wall-clock budget of one featurize call, checked between stages and every few hundred
    # nodes (ONNX's C++ shape inference itself cannot be interrupted, but it is linear)
    max_seconds: float = 120.0
    # files above this are read without large initializers' data (see wire.py)
    weightless_above: int = 1 * 2**20
    strip_tensor_bytes: int = wire.STRIP_BYTES


@dataclass
class InferredModel:
    """A model with concrete input shapes and a shape for (almost) every value."""

    model: onnx.ModelProto
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, int]
    weights: set[str]
    data_inputs: list[str]
    unresolved: list[str] = field(default_factory=list)
    external_data: bool = False
    batch_size: int = 1  # the batch bound (the exported one for batch_size=None)
    exported_batch: int | None = None  # None: the file's batch axis is dynamic
    rebound: list[str] = field(default_factory=list)  # nodes whose shape target was re-bound


def read_model(src: str | os.PathLike | bytes, limits: Limits = Limits()) -> onnx.ModelProto:
    """Parse an ONNX file path or bytes without touching any external-data file.

    Files above ``limits.weightless_above`` bytes are read field by field with the payload of
    large initializers skipped (:func:`wire.read_without_weights`): their shapes are all the
    featurizer needs, and the weights never enter memory.
    """
    if isinstance(src, (bytes, bytearray, memoryview)):
        size = len(src)
        if size > limits.max_file_bytes:
            raise errors.TooLarge(f"model is {size:,} bytes, limit {limits.max_file_bytes:,}")
        data = _without_weights(io.BytesIO(src), size, limits) if size > limits.weightless_above \
            else bytes(src)
    else:
        path = Path(src)
        if not path.is_file():
            raise errors.NotAModel(f"{path} is not a file")
        size = path.stat().st_size
        if size > limits.max_file_bytes:
            raise errors.TooLarge(f"file is {size:,} bytes, limit {limits.max_file_bytes:,}")
        with open(path, "rb") as f:
            data = _without_weights(f, size, limits) if size > limits.weightless_above \
                else f.read()
    if not data:
        raise errors.CorruptModel("empty file")
    try:
        model = onnx.ModelProto.FromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        deep = wire.too_deep_error(data)
        if deep is not None:
            raise deep from None
        raise errors.CorruptModel(f"not an ONNX protobuf ({e.__class__.__name__})") from None
    check_model(model, limits)
    return model


def _without_weights(f, size: int, limits: Limits) -> bytes:
    """The file's bytes less large initializers' data; the whole file if it is not protobuf."""
    try:
        return wire.read_without_weights(f, size, limits.strip_tensor_bytes)[0]
    except wire.WireError:
        f.seek(0)  # let protobuf's parser give its verdict on the original bytes
        return f.read()


def check_model(model: onnx.ModelProto, limits: Limits = Limits()) -> None:
    """The structural checks of :func:`read_model`, for a model parsed elsewhere.

    (Split out so that ``featurize(ModelProto)`` refuses empty or oversized graphs exactly as
    ``featurize(bytes)`` does; it used to featurize an empty graph into a 0-node Graph.)
    """
    if not model.HasField("graph") or not model.opset_import:
        raise errors.NotAModel("protobuf has no ONNX graph or opset (not an ONNX model file)")
    if len(model.graph.node) == 0:
        raise errors.EmptyGraph("graph has no operator nodes")
    if len(model.graph.node) > limits.max_nodes:
        raise errors.TooLarge(f"graph has {len(model.graph.node):,} nodes, limit {limits.max_nodes:,}")


def _check_external(model: onnx.ModelProto) -> bool:
    """True when tensors live in external files; refuse locations that escape the model folder."""
    found = False
    for t in _all_tensors(model.graph):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        found = True
        loc = next((e.value for e in t.external_data if e.key == "location"), "")
        if not isinstance(loc, str):  # protobuf hands back bytes for invalid UTF-8
            raise errors.ExternalData(f"tensor '{t.name}' has an external-data location that "
                                      "is not valid text")
        parts = Path(loc).parts
        if not loc or Path(loc).is_absolute() or ".." in parts or loc.startswith(("\\", "~")):
            raise errors.ExternalData(
                f"tensor '{t.name}' points to external data '{loc}' outside the model's folder")
    return found


def _all_tensors(graph: onnx.GraphProto):
    yield from graph.initializer
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                yield a.t


def _dims(vi: onnx.ValueInfoProto) -> list[onnx.TensorShapeProto.Dimension] | None:
    tt = vi.type.tensor_type
    return list(tt.shape.dim) if tt.HasField("shape") else None


def _leading_static(vi: onnx.ValueInfoProto) -> int | None:
    dims = _dims(vi)
    return dims[0].dim_value if dims and dims[0].HasField("dim_value") else None


def split_inputs(model: onnx.ModelProto) -> tuple[list[str], set[str]]:
    """Tell data inputs from weights exported as graph inputs (``export_params=False``).

    Initializers are weights. Of the remaining inputs, those with a symbolic dimension are data;
    when every input is static, a model whose weights are all inputs (no large initializer) has
    its data first, as torch's exporter writes them, and the rest are weights.
    """
    init = {t.name for t in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in init]
    symbolic = [vi.name for vi in inputs
                if any(not d.HasField("dim_value") for d in (_dims(vi) or []))]
    if symbolic:
        data = symbolic
    elif len(inputs) > 1 and not any(math.prod(t.dims) > 64 for t in model.graph.initializer):
        data = [inputs[0].name]
    else:
        data = [vi.name for vi in inputs]
    weights = init | {vi.name for vi in inputs if vi.name not in data}
    return data, weights


def strip_weights(model: onnx.ModelProto, keep_max_elements: int = 64) -> onnx.ModelProto:
    """Move initializers above ``keep_max_elements`` to typed graph inputs, in place.

    Shapes survive, values do not: shape inference never needs a weight's values, and without
    them the model is small to copy and to hand to ONNX's C++ shape inference. Small tensors
    stay because shape arithmetic reads them (Reshape targets, Slice bounds).
    """
    keep, moved = [], []
    for init in model.graph.initializer:
        (keep if math.prod(init.dims) <= keep_max_elements else moved).append(init)
    if moved:
        del model.graph.initializer[:]
        model.graph.initializer.extend(keep)
        model.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                                 for t in moved)
    return model


def symbolic_dims(model: onnx.ModelProto) -> set[str]:
    """The names of the graph inputs' symbolic dimensions after the first (the batch): what
    ``--dim NAME=N`` can bind."""
    return {d.dim_param for vi in model.graph.input if (shape := _dims(vi)) is not None
            for d in list(shape)[1:] if d.dim_param}


def fixed_size(name: str, shape: tuple[int | str, ...], resolution: int) -> errors.UnsupportedConstruct | None:
    """The refusal of a ``resolution`` that a data input of static ``shape`` cannot take (None: it can)."""
    if resolution in shape[1:]:
        return None
    return errors.UnsupportedConstruct(
        f"input {name!r} has shape {list(shape)}: the file fixes its size, so a resolution of {resolution} cannot "
        f"be bound to it; export the model at {resolution} (or with dynamic spatial axes), or leave the resolution out")


def declared_fixed_size(model: onnx.ModelProto, resolution: int) -> errors.UnsupportedConstruct | None:
    """:func:`fixed_size` of the first data input as the file declares it (before shape inference)."""
    data, _ = split_inputs(model)
    by_name = {vi.name: vi for vi in model.graph.input}
    shape = _dims(by_name[data[0]]) if data else None
    if not shape or any(not d.HasField("dim_value") for d in shape[1:]):
        return None
    return fixed_size(data[0], (shape[0].dim_param or shape[0].dim_value, *(d.dim_value for d in shape[1:])), resolution)


def bind_inputs(model: onnx.ModelProto, data_inputs: list[str], batch_size: int,
                resolution: int | None = None, dims: dict[str, int] | None = None) -> None:
    """Give every data input concrete dimensions, in place."""
    dims = dims or {}
    by_name = {vi.name: vi for vi in model.graph.input}
    for name in data_inputs:
        shape = _dims(by_name[name])
        if shape is None:
            raise errors.UnresolvedShapes(f"input '{name}' has no shape; export it with one")
        for i, d in enumerate(shape):
            if i == 0:
                d.Clear()
                d.dim_value = batch_size
            elif d.HasField("dim_value"):
                continue
            elif d.dim_param in dims:
                d.dim_value = dims[d.dim_param]
            elif resolution and i >= 2:
                d.dim_value = resolution
            else:
                raise errors.UnresolvedShapes(
                    f"input '{name}' dim {i} ('{d.dim_param}') is symbolic: pass a resolution "
                    f"or --dim {d.dim_param or 'NAME'}=N")


def _collect_shapes(model: onnx.ModelProto, into: dict, dtypes: dict) -> None:
    g = model.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type
        if tt.elem_type:
            dtypes.setdefault(vi.name, tt.elem_type)
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            into[vi.name] = tuple(d.dim_value for d in tt.shape.dim)
    for t in g.initializer:
        into[t.name] = tuple(t.dims)
        dtypes[t.name] = t.data_type


def _label(node: onnx.NodeProto) -> str:
    """A node's name for messages: its name, else its first named output, else its op."""
    return node.name or next((o for o in node.output if o), "") or node.op_type


def _refuse_control_flow(g: onnx.GraphProto) -> None:
    for node in g.node:
        if node.op_type in CONTROL_FLOW or any(
                a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                for a in node.attribute):
            raise errors.UnsupportedConstruct(
                f"node '{_label(node)}' is control flow ({node.op_type}) "
                "with sub-graphs, which is not featurized")


def _shapes_at(model: onnx.ModelProto, data: list[str], batch: int, resolution, dims,
               limits: Limits, deadline: float | None) -> tuple[dict, dict]:
    """Bind the data inputs at ``batch`` and infer (then fold) every shape; model in place."""
    g = model.graph
    bind_inputs(model, data, batch, resolution, dims)
    # Stale shapes from the exporter would conflict with the newly bound batch size, except for
    # outputs of custom-domain ops, which nothing else can infer.
    custom_out = {o for n in g.node if n.domain not in ("", "ai.onnx") for o in n.output}
    keep = [vi for vi in g.value_info if vi.name in custom_out]
    del g.value_info[:]
    g.value_info.extend(keep)
    for vi in g.output:
        if vi.name not in custom_out:
            vi.type.tensor_type.ClearField("shape")
    inferred = safe_infer.infer_shapes(model)
    shapes: dict[str, tuple[int, ...]] = {}
    dtypes: dict[str, int] = {}
    _collect_shapes(inferred, shapes, dtypes)
    if any(o not in shapes for n in g.node for o in n.output if o):
        resolve_shapes(inferred, shapes, dtypes, limits.max_fold_elements, deadline)
    return shapes, dtypes


def exported_batch(model: onnx.ModelProto, data: list[str]) -> int | None:
    """The batch the data inputs were exported with, or None when it is dynamic or mixed."""
    by_name = {vi.name: vi for vi in model.graph.input}
    leading = {_leading_static(by_name[x]) for x in data}
    return leading.pop() if len(leading) == 1 and None not in leading else None


def infer(model: onnx.ModelProto, batch_size: int | None, resolution: int | None = None,
          dims: dict[str, int] | None = None, limits: Limits = Limits(),
          deadline: float | None = None) -> InferredModel:
    """Bind inputs and infer every value's shape. ``model`` is modified in place.

    ``batch_size=None`` keeps the batch the file was exported with (1 where it is dynamic). A
    fixed-batch file asked for another batch is re-bound (:mod:`rebind`): shapes are first
    inferred at the exported batch to find the constant shape targets that carry it.
    """
    g = model.graph
    _refuse_control_flow(g)
    external = _check_external(model)
    data, weights = split_inputs(model)
    if not data:
        raise errors.UnsupportedConstruct("model has no data input (every input is a weight)")
    exported = exported_batch(model, data)
    batch = batch_size or exported or 1
    strip_weights(model, keep_max_elements=MAX_ELEMENTS)
    rebound: list[str] = []
    if exported is not None and batch != exported:
        shapes0, _ = _shapes_at(model, data, exported, resolution, dims, limits, deadline)
        constants = weights | {o for n in g.node if n.op_type == "Constant" for o in n.output}
        rebound = rebind.rebind_batch(model, shapes0, constants, exported, batch)
        rebind.rebind_custom_outputs(model, exported, batch)
        try:
            shapes, dtypes = _shapes_at(model, data, batch, resolution, dims, limits, deadline)
        except errors.UnsupportedConstruct as e:
            raise errors.FixedBatch(
                f"the batch size {exported} is baked into the graph and re-binding it to {batch} "
                f"failed ({str(e).split(': ', 1)[-1][:200]}); export it with a dynamic batch "
                "axis, or featurize at the exported batch (batch_size=None)") from None
        rebind.check_rebound({vi.name: shapes0.get(vi.name) for vi in g.output}, shapes,
                             exported, batch)
    else:
        shapes, dtypes = _shapes_at(model, data, batch, resolution, dims, limits, deadline)
    outputs = [o for n in g.node for o in n.output if o]
    missing = [o for o in outputs if o not in shapes]
    if len(missing) > limits.max_unresolved_fraction * max(len(outputs), 1):
        producer = next(n for n in g.node if missing[0] in n.output)
        raise errors.UnresolvedShapes(
            f"{len(missing)} of {len(outputs)} tensor shapes unresolved, first at node "
            f"'{producer.name or missing[0]}' ({producer.domain + ':' if producer.domain else ''}"
            f"{producer.op_type})")
    return InferredModel(model, shapes, dtypes, weights, data, missing, external, batch,
                         exported, rebound)


__all__ = ["Limits", "InferredModel", "read_model", "symbolic_dims", "fixed_size", "declared_fixed_size", "check_model", "infer", "split_inputs",
           "bind_inputs", "exported_batch"]
