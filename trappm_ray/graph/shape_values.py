"""The batch as a value: shape vectors a dynamic export computes, followed element by element.

Exporters turn ``x.shape[0]`` into ``Shape -> Gather``, and torch's ``expand(B, -1, -1)`` into
``Shape -> Gather -> Concat -> Equal/Where/ConstantOfShape -> Expand``. For
:mod:`trappm_ray.graph.batch_axes` each element of such a vector is either a number (the same at
every batch) or k x the batch; :func:`evaluate` carries that through the few operators these
chains use, and gives up (None) on anything else, such as ``batch + 1``.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import onnx
from onnx import numpy_helper

# shape-vector arithmetic this module follows element by element
SHAPE_ARITH = {"Gather", "Unsqueeze", "Squeeze", "Identity", "Cast", "Reshape", "Concat", "Slice", "Add", "Sub",
               "Mul", "Div", "Equal", "Where", "ConstantOfShape"}
Elem = tuple[int | None, int]  # (k: the value is k x batch, None: independent of it; value at the featurized batch)


def constants(model: onnx.ModelProto, kinds: tuple[int, ...], cast=int) -> dict[str, list]:
    """Small constants (scalars and vectors) of the element types ``kinds`` by tensor name, as
    flat lists of ``cast``."""
    out: dict[str, list] = {}
    tensors = [(t.name, t) for t in model.graph.initializer]
    tensors += [(n.output[0], a.t) for n in model.graph.node
                if n.op_type == "Constant" and n.output for a in n.attribute if a.name == "value"]
    for name, t in tensors:
        if (t.data_type in kinds and len(t.dims) <= 1
                and math.prod(t.dims) <= 64 and t.data_location != onnx.TensorProto.EXTERNAL):
            try:
                out[name] = [cast(v) for v in numpy_helper.to_array(t).ravel()]
            except (ValueError, TypeError):
                continue
    return out


def _broadcast(x: list[Elem], y: list[Elem]) -> list[tuple[Elem, Elem]] | None:
    if len(x) == len(y):
        return list(zip(x, y))
    if len(x) == 1 or len(y) == 1:
        return [(x[i if len(x) > 1 else 0], y[i if len(y) > 1 else 0]) for i in range(max(len(x), len(y)))]
    return None


def _binary(op: str, p: Elem, q: Elem) -> Elem | None:
    """One element of ``op`` on shape values; None where the result is not a number nor a
    multiple of the batch (an affine ``batch + 1`` is not followed)."""
    (k1, v1), (k2, v2) = p, q
    if k1 is None and k2 is None:  # two numbers
        if op == "Div":
            return (None, v1 // v2) if v2 and v1 % v2 == 0 else None
        return None, {"Add": v1 + v2, "Sub": v1 - v2, "Mul": v1 * v2, "Equal": int(v1 == v2)}[op]
    if op in ("Add", "Sub"):
        sign = 1 if op == "Add" else -1
        if (k1 is None and v1) or (k2 is None and v2):
            return None  # a multiple of the batch plus a number
        k = (k1 or 0) + sign * (k2 or 0)
        return (k or None), v1 + sign * v2
    if op == "Mul" and (k1 is None or k2 is None):
        return (k1 * v2 if k1 is not None else k2 * v1), v1 * v2  # type: ignore[operator]
    if op == "Div" and k1 is not None and k2 is None and v2 and k1 % v2 == 0:
        return k1 // v2, v1 // v2
    if op == "Equal":
        if k1 is not None and k2 is not None:
            return None, int(k1 == k2)
        times, c = (k1, v2) if k1 is not None else (k2, v1)
        return (None, 0) if times is not None and times > 0 and c <= 0 else None  # k x batch > 0 is never <= 0
    return None


def evaluate(op: str, a: dict, ins: list[str], values: Callable[[str], list[Elem] | None],
             consts: dict[str, list]) -> list[Elem] | None:
    """``op``'s output elements from its inputs' (``values``: a tensor's elements or None;
    ``consts``: integer constants by name), None where not followed."""
    try:
        return _evaluate(op, a, ins, values, consts)
    except (ValueError, IndexError, KeyError, ZeroDivisionError):
        return None


def _evaluate(op: str, a: dict, ins: list[str], values, consts: dict[str, list]) -> list[Elem] | None:
    x = values(ins[0])
    if x is None:
        return None
    if op in ("Unsqueeze", "Squeeze", "Identity", "Cast", "Reshape"):
        return x
    if op == "Gather" and int(a.get("axis", 0)) == 0 and len(ins) > 1 and ins[1] in consts:
        return [x[i] for i in consts[ins[1]]] if all(-len(x) <= i < len(x) for i in consts[ins[1]]) else None
    if op == "Concat" and int(a.get("axis", 0)) in (0, -1):
        parts = [values(y) for y in ins]
        return None if any(p is None for p in parts) else [e for p in parts for e in p]  # type: ignore[union-attr]
    if op == "Slice" and len(ins) >= 3 and all(y in consts for y in ins[1:] if y):
        (start,), (end,) = consts[ins[1]][:1], consts[ins[2]][:1]
        step = consts[ins[4]][0] if len(ins) > 4 and ins[4] else 1
        if len(ins) > 3 and ins[3] and consts[ins[3]] not in ([0], [-1]):
            return None
        return x[slice(start, end, step)]
    if op == "ConstantOfShape":
        fill = a.get("value")
        fill = int(numpy_helper.to_array(fill).ravel()[0]) if fill is not None else 0
        return [(None, fill)] * x[0][1] if len(x) == 1 and x[0][0] is None and 0 <= x[0][1] <= 64 else None
    rest = [values(y) for y in ins[1:]]
    if op in ("Add", "Sub", "Mul", "Div", "Equal") and len(rest) == 1 and rest[0] is not None:
        pairs = _broadcast(x, rest[0])
        out = None if pairs is None else [_binary(op, p, q) for p, q in pairs]
        return None if out is None or any(e is None for e in out) else out  # type: ignore[return-value]
    if op == "Where" and len(rest) == 2 and rest[0] is not None and rest[1] is not None:
        yes, no = rest[0], rest[1]
        n = max(len(x), len(yes), len(no))
        if any(len(v) not in (1, n) for v in (x, yes, no)) or any(k is not None for k, _ in x):
            return None
        pick = lambda v, i: v[i if len(v) > 1 else 0]  # noqa: E731
        return [pick(yes, i) if pick(x, i)[1] else pick(no, i) for i in range(n)]
    return None


__all__ = ["SHAPE_ARITH", "Elem", "constants", "evaluate"]
