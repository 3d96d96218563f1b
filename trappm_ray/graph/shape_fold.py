"""Evaluate the small integer sub-graphs that compute shapes, so shape inference can finish.

Tracing exporters turn every ``x.shape`` into ``Shape -> Gather -> ... -> Reshape/Pad`` chains.
Once the inputs have concrete dimensions those chains are constants, but ONNX's data propagation
only follows a handful of ops. This module runs them with numpy in one pass in graph order,
re-inferring each node whose output shape is still unknown with the computed values supplied.
"""
from __future__ import annotations

import logging
import math
import time

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trappm_ray import errors
from trappm_ray.graph import shape_rules

MAX_ELEMENTS = 4096  # shape arithmetic is tiny; anything bigger is data, not a shape
log = logging.getLogger(__name__)


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _slice(x, starts, ends, axes=None, steps=None):
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    idx = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        idx[int(a)] = slice(int(s), int(e), int(st))
    return x[tuple(idx)]


def _clip(x, lo, hi):
    if lo is not None:
        x = np.maximum(x, lo.astype(x.dtype))
    if hi is not None:
        x = np.minimum(x, hi.astype(x.dtype))
    return x


def _one_hot(idx, depth, values, axis):
    idx = np.where(idx < 0, idx + depth, idx)
    out = np.where(np.arange(depth) == idx[..., None], values[1], values[0])
    return out if axis == -1 else np.moveaxis(out, -1, axis)


def _binary(fn):
    return lambda a, v: fn(v[0], v[1])


_OPS = {
    "Add": _binary(np.add), "Sub": _binary(np.subtract), "Mul": _binary(np.multiply),
    "Div": lambda a, v: (v[0] // v[1] if v[0].dtype.kind in "iu" else v[0] / v[1]),
    "Mod": lambda a, v: (np.fmod(v[0], v[1]) if a.get("fmod") else np.mod(v[0], v[1])),
    "Min": lambda a, v: np.minimum.reduce(v), "Max": lambda a, v: np.maximum.reduce(v),
    "Neg": lambda a, v: -v[0], "Abs": lambda a, v: np.abs(v[0]),
    "Clip": lambda a, v: _clip(v[0], v[1] if len(v) > 1 else None, v[2] if len(v) > 2 else None),
    "Floor": lambda a, v: np.floor(v[0]), "Ceil": lambda a, v: np.ceil(v[0]),
    "Sqrt": lambda a, v: np.sqrt(v[0]),
    "Equal": _binary(np.equal), "Less": _binary(np.less), "Greater": _binary(np.greater),
    "Not": lambda a, v: np.logical_not(v[0]),
    "Where": lambda a, v: np.where(v[0], v[1], v[2]),
    "Cast": lambda a, v: v[0].astype(helper.tensor_dtype_to_np_dtype(a["to"])),
    "Identity": lambda a, v: v[0],
    "Concat": lambda a, v: np.concatenate(v, axis=a["axis"]),
    "Gather": lambda a, v: np.take(v[0], v[1], axis=a.get("axis", 0)),
    "Unsqueeze": lambda a, v: np.reshape(v[0], _unsqueezed(v[0].shape, a.get("axes", v[1:2]))),
    "Squeeze": lambda a, v: np.squeeze(v[0], axis=tuple(int(i) for i in a.get(
        "axes", v[1] if len(v) > 1 and v[1] is not None
        else [i for i, d in enumerate(v[0].shape) if d == 1]))),
    "Reshape": lambda a, v: np.reshape(v[0], [d if d != 0 else v[0].shape[i]
                                             for i, d in enumerate(v[1].tolist())]),
    "Transpose": lambda a, v: np.transpose(v[0], a.get("perm")),
    "Slice": lambda a, v: _slice(v[0], *[None if x is None else x.tolist() for x in v[1:]]),
    "ConstantOfShape": lambda a, v: np.full(v[0].astype(np.int64), *_fill_value(a)),
    "Range": lambda a, v: np.arange(v[0], v[1], v[2]),
    "Tile": lambda a, v: np.tile(v[0], v[1].astype(np.int64)),
    "OneHot": lambda a, v: _one_hot(v[0], int(np.ravel(v[1])[0]), v[2], a.get("axis", -1)),
    "ReduceProd": lambda a, v: np.prod(v[0], axis=None if not a.get("axes") else tuple(a["axes"]),
                                       keepdims=bool(a.get("keepdims", 1))),
    "Expand": lambda a, v: v[0] * np.ones(v[1].astype(np.int64), dtype=v[0].dtype),
}


_VALUE_OPS = set(_OPS) | {"Constant", "Shape", "Size"}
# Ops whose output never has more elements than their first input.
_NO_GROWTH = {"Neg", "Abs", "Floor", "Ceil", "Sqrt", "Not", "Cast", "Identity", "Clip",
              "Unsqueeze", "Squeeze", "Reshape", "Transpose", "Slice", "ReduceProd"}


def _dims_of(v) -> list[int] | None:
    """A shape given as a value (ConstantOfShape, Expand, Tile), or None if it is not one."""
    dims = [int(d) for d in np.ravel(v)] if v is not None and v.size <= MAX_ELEMENTS else None
    return None if dims is None or any(d < 0 for d in dims) else dims


def output_size(op: str, a: dict, v: list) -> int | None:
    """Upper bound on the elements ``_OPS[op]`` would produce from values ``v``, or None.

    Computed in Python integers from the inputs' shapes and values, before numpy is called:
    a 300-byte file can ask for ``Range(0, 10**12, 1)``, and evaluating first to check after
    is what let such files exhaust memory. None means "cannot bound": the value stays unknown.
    """
    try:
        return _output_size(op, a, v)
    except (AttributeError, TypeError, ValueError, IndexError, OverflowError, ZeroDivisionError):
        return None  # malformed inputs (absent, wrong rank or type): not evaluated at all


def _output_size(op: str, a: dict, v: list) -> int | None:
    present = [x for x in v if x is not None]
    if op in _NO_GROWTH:
        return int(v[0].size)
    if op == "ConstantOfShape" or (op in ("Expand", "Tile") and len(v) > 1):
        dims = _dims_of(v[-1] if op != "ConstantOfShape" else v[0])
        if dims is None:
            return None
        if op == "Tile":
            return math.prod(d * r for d, r in zip(v[0].shape, dims)) if v[0].ndim == len(dims) \
                else None
        if op == "Expand":
            try:
                return math.prod(shape_rules.broadcast(tuple(v[0].shape), tuple(dims)))
            except ValueError:
                return None
        return math.prod(dims)
    if op == "Range" and len(v) == 3:
        start, limit, delta = (float(np.ravel(x)[0]) if x.size else 0.0 for x in v)
        if delta == 0 or not all(math.isfinite(f) for f in (start, limit, delta)):
            return None
        return max(math.ceil((limit - start) / delta), 0)
    if op == "Concat":
        return sum(int(x.size) for x in present)
    if op == "Gather" and len(v) == 2 and v[0].ndim:
        axis = int(a.get("axis", 0)) % v[0].ndim
        return int(v[0].size) // max(v[0].shape[axis], 1) * int(v[1].size)
    if op == "OneHot" and len(v) == 3 and v[1].size:
        return int(v[0].size) * max(int(np.ravel(v[1])[0]), 0)
    try:  # elementwise ops: the broadcast of the inputs
        return math.prod(shape_rules.broadcast(*(tuple(x.shape) for x in present)))
    except ValueError:
        return None


def _array(t: onnx.TensorProto) -> np.ndarray:
    """``numpy_helper.to_array`` that never opens an external-data file.

    ``to_array`` loads EXTERNAL tensors from disk (relative to the working directory), which
    broke the loader's promise never to read external data and escaped as onnx's
    ValidationError when the file was absent. Shapes never need those values: refuse them.
    """
    if t.data_location == onnx.TensorProto.EXTERNAL:
        raise ValueError(f"tensor '{t.name}' holds external data")
    return numpy_helper.to_array(t)


def _fill_value(a: dict) -> tuple:
    """ConstantOfShape's fill value and dtype; the attribute must hold one element."""
    if "value" not in a:
        return 0.0, np.float32
    if math.prod(a["value"].dims) != 1:
        raise ValueError("ConstantOfShape value must have one element")
    v = _array(a["value"])
    return v.item(), v.dtype


def _unsqueezed(shape, axes) -> list[int]:
    axes = [int(x) for x in np.asarray(axes).ravel()]
    out = list(shape)
    rank = len(shape) + len(axes)
    for ax in sorted(a % rank for a in axes):
        out.insert(ax, 1)
    return out


def _node_types(node, shapes, dtypes) -> dict | None:
    types = {}
    for x in node.input:
        if x:
            if x not in shapes or x not in dtypes:
                return None
            types[x] = helper.make_tensor_type_proto(dtypes[x], shapes[x])
    return types


_BOOL_OUT = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or",
             "Xor", "IsNaN", "IsInf"}


def _apply_rule(node, a: dict, shapes: dict, dtypes: dict, known: dict) -> bool:
    """Python shape rule for ``node`` (see :mod:`shape_rules`); True if it gave every output."""
    ins = [shapes.get(x) if x else None for x in node.input]
    vals = [known.get(x) if x else None for x in node.input]
    try:
        out = shape_rules.output_shapes(node.op_type, a, ins, vals)
    except (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError):
        return False
    outputs = [o for o in node.output if o]
    if out is None or len(out) < len(outputs) or any(d is None or d < 0 for s in out for d in s):
        return False
    for name, shape in zip(outputs, out):
        shapes[name] = tuple(int(d) for d in shape)
        if name not in dtypes:
            first = dtypes.get(node.input[0]) if node.input else None
            dtypes[name] = (a["to"] if node.op_type == "Cast" else onnx.TensorProto.BOOL
                            if node.op_type in _BOOL_OUT else first or onnx.TensorProto.FLOAT)
    return True


def resolve_shapes(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]],
                   dtypes: dict[str, int], max_elements: int = MAX_ELEMENTS,
                   deadline: float | None = None) -> None:
    """Fill ``shapes`` (in place) for outputs whole-graph inference left unknown.

    One pass in graph order: integer tensors computable from known shapes are evaluated, and
    each node with an unknown output is re-inferred on its own with those values supplied.

    Args:
        model: a model whose data inputs have concrete dimensions, in topological order.
        shapes: the concrete shapes known so far; extended in place.
        dtypes: element types by tensor name; extended in place.
        max_elements: the largest value (in elements) ever computed or kept; above it a value
            is unknown, never materialised.
        deadline: a ``time.monotonic()`` value after which :class:`errors.TooSlow` is raised.
    """
    opsets = list(model.opset_import)
    version = {o.domain or "": o.version for o in opsets}
    known: dict[str, np.ndarray] = {}
    for t in model.graph.initializer:
        if math.prod(t.dims) <= max_elements and t.data_location != onnx.TensorProto.EXTERNAL:
            try:
                known[t.name] = _array(t)
            except (ValueError, TypeError, KeyError):  # malformed tensor: its value stays unknown
                pass
    for i, node in enumerate(model.graph.node):
        if deadline is not None and i % 256 == 0 and time.monotonic() > deadline:
            raise errors.TooSlow("shape folding ran past the featurize time limit")
        op, inputs = node.op_type, list(node.input)
        a = None  # attributes are decoded only for nodes this pass works on
        if any(o not in shapes for o in node.output if o):
            a = _attrs(node) if node.attribute else {}
            if node.domain in ("", "ai.onnx") and _apply_rule(node, a, shapes, dtypes, known):
                pass
            elif (types := _node_types(node, shapes, dtypes)) is not None:
                try:
                    schema = onnx.defs.get_schema(node.op_type, version.get(node.domain, 1),
                                                  node.domain)
                    data = {x: numpy_helper.from_array(known[x], x) for x in types if x in known}
                    out = onnx.shape_inference.infer_node_outputs(schema, node, types, data,
                                                                  opset_imports=opsets)
                except (onnx.defs.SchemaError, onnx.shape_inference.InferenceError, RuntimeError,
                        onnx.checker.ValidationError,
                        ValueError, TypeError):
                    out = {}
                for name, tp in out.items():
                    tt = tp.tensor_type
                    if tt.elem_type:
                        dtypes.setdefault(name, tt.elem_type)
                    if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
                        shapes[name] = tuple(d.dim_value for d in tt.shape.dim)
        if op not in _VALUE_OPS or (op in _OPS and not all(x in known for x in inputs if x)):
            continue
        if a is None:
            a = _attrs(node) if node.attribute else {}
        value = None
        try:
            if op == "Constant" and "value" in a and math.prod(a["value"].dims) <= max_elements:
                value = _array(a["value"])
            elif op == "Shape" and node.input[0] in shapes:
                shp = shapes[node.input[0]]
                value = np.array(shp[a.get("start", 0):a.get("end", len(shp))], dtype=np.int64)
            elif op == "Size" and node.input[0] in shapes:
                value = np.array(math.prod(shapes[node.input[0]]), dtype=np.int64)
            elif op in _OPS:
                # absent optional inputs ("") stay as None so positions are kept
                args = [known[x] if x else None for x in inputs]
                size = output_size(op, a, args)
                if size is not None and size <= max_elements:
                    with np.errstate(all="ignore"):  # hostile values: no warning spam
                        value = np.asarray(_OPS[op](a, args))
                else:  # too big to be shape arithmetic, or unbounded: leave it unknown
                    log.debug("not folding %s '%s': %s elements", op, node.name, size)
        except (ValueError, TypeError, IndexError, KeyError, OverflowError, MemoryError,
                ZeroDivisionError):
            value = None
        if value is not None and value.size <= max_elements and len(node.output) == 1:
            known[node.output[0]] = value
            shapes.setdefault(node.output[0], tuple(value.shape))
