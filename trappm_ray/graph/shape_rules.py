"""Output shapes of the common ONNX operators, computed in Python.

:func:`trappm_ray.graph.shape_fold.resolve_shapes` re-infers the nodes that whole-graph inference left
unknown. ONNX's per-node inference costs 100-200 us a call from Python; these rules cost a few,
which matters because one unresolved padding at the stem of a network leaves every node after
it unknown. Anything not covered returns None and falls back to ONNX.
"""
from __future__ import annotations

import numpy as np

Shape = tuple[int, ...]

SAME_SHAPE = {
    "Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Log", "Sqrt", "Neg", "Abs", "Cast", "CastLike",
    "Softmax", "LogSoftmax", "Identity", "Dropout", "Clip", "LeakyRelu", "HardSwish",
    "HardSigmoid", "Gelu", "Elu", "Selu", "Celu", "Mish", "Softplus", "Softsign", "Reciprocal",
    "Floor", "Ceil", "Not", "Sign", "Round", "BatchNormalization", "LayerNormalization",
    "InstanceNormalization", "GroupNormalization", "LpNormalization", "IsNaN", "IsInf", "Sin",
    "Cos", "Swish", "ThresholdedRelu", "Shrink", "PRelu",
}
BROADCAST = {"Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "LessOrEqual",
             "GreaterOrEqual", "And", "Or", "Xor", "Where", "Max", "Min", "Mod", "Sum", "Mean",
             "BitwiseAnd", "BitwiseOr"}


def broadcast(*shapes: Shape) -> Shape:
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = {s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0} - {1}
        if len(dims) > 1:
            raise ValueError(f"shapes {shapes} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _axes(a: dict, v: list, rank: int, index: int = 1) -> list[int] | None:
    axes = a.get("axes")
    if axes is None and len(v) > index and v[index] is not None:
        axes = v[index].tolist()
    return None if axes is None else [int(x) % rank for x in np.ravel(axes)]


def _window(op: str, a: dict, x: Shape, w: Shape | None) -> Shape:
    spatial = x[2:]
    k = a.get("kernel_shape") or (w[2:] if w else None)
    n = len(spatial)
    strides = a.get("strides") or [1] * n
    dil = a.get("dilations") or [1] * n
    pads = a.get("pads") or [0] * 2 * n
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    out = []
    for i, d in enumerate(spatial):
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            out.append(-(-d // strides[i]))
            continue
        eff = (k[i] - 1) * dil[i] + 1
        total = d + pads[i] + pads[i + n] - eff
        out.append((-(-total // strides[i]) if a.get("ceil_mode") else total // strides[i]) + 1)
    channels = (w[0] if w else x[1]) if op == "Conv" else x[1]
    return (x[0], channels, *out)


def output_shapes(op: str, a: dict, ins: list[Shape | None], v: list) -> list[Shape] | None:
    """Shapes of a node's outputs, or None when no rule applies.

    Args:
        op: operator type (default domain).
        a: attributes by name.
        ins: input shapes (None where unknown or absent).
        v: known input values (numpy arrays, None where unknown), aligned with ``ins``.
    """
    x = ins[0] if ins else None
    if op in SAME_SHAPE:
        return [x] if x is not None else None
    if op in BROADCAST:
        present = [s for s in ins if s is not None]
        return [broadcast(*present)] if present and len(present) == len(ins) else None
    if x is None:
        return None
    rank = len(x)
    if op == "Transpose":
        perm = a.get("perm") or list(range(rank))[::-1]
        return [tuple(x[p] for p in perm)]
    if op == "Reshape" and len(v) > 1 and v[1] is not None:
        target = [int(d) for d in v[1].tolist()]
        target = [x[i] if d == 0 and not a.get("allowzero") else d for i, d in enumerate(target)]
        if -1 in target:
            known = int(np.prod([d for d in target if d != -1]))
            target[target.index(-1)] = int(np.prod(x)) // max(known, 1)
        return [tuple(target)]
    if op == "MatMul" and len(ins) > 1 and ins[1] is not None:
        y = ins[1]
        if len(x) < 2 or len(y) < 2:
            return None
        return [broadcast(x[:-2], y[:-2]) + (x[-2], y[-1])]
    if op == "Gemm" and len(ins) > 1 and ins[1] is not None:
        m = x[1] if a.get("transA") else x[0]
        n = ins[1][0] if a.get("transB") else ins[1][1]
        return [(m, n)]
    if op == "Concat":
        if any(s is None for s in ins):
            return None
        axis = a["axis"] % rank
        return [x[:axis] + (sum(s[axis] for s in ins),) + x[axis + 1:]]
    if op == "Pad":
        pads = a.get("pads")
        if pads is None and len(v) > 1 and v[1] is not None:
            pads = v[1].tolist()
        if pads is None or (len(v) > 3 and ins[3] is not None):  # axes input: let ONNX do it
            return None
        return [tuple(d + int(pads[i]) + int(pads[i + rank]) for i, d in enumerate(x))]
    if op in ("Conv", "MaxPool", "AveragePool") and rank >= 3:
        return [_window(op, a, x, ins[1] if op == "Conv" and len(ins) > 1 else None)]
    if op in ("GlobalAveragePool", "GlobalMaxPool"):
        return [x[:2] + (1,) * (rank - 2)]
    if op == "Flatten":
        axis = a.get("axis", 1) % (rank + 1) if rank else 0
        return [(int(np.prod(x[:axis])), int(np.prod(x[axis:])))]
    if op == "Unsqueeze":
        axes = a.get("axes")
        if axes is None:
            if len(v) < 2 or v[1] is None:
                return None
            axes = v[1].tolist()
        out_rank = rank + len(axes)
        out = list(x)
        for ax in sorted(int(i) % out_rank for i in axes):
            out.insert(ax, 1)
        return [tuple(out)]
    if op == "Squeeze":
        axes = _axes(a, v, rank)
        if axes is None:
            if len(ins) > 1 and ins[1] is not None:  # axes given but value unknown
                return None
            axes = [i for i, d in enumerate(x) if d == 1]
        return [tuple(d for i, d in enumerate(x) if i not in axes)]
    if op == "Slice" and all(val is not None for val in v[1:3]):
        starts, ends = v[1].tolist(), v[2].tolist()
        axes = v[3].tolist() if len(v) > 3 and v[3] is not None else list(range(len(starts)))
        steps = v[4].tolist() if len(v) > 4 and v[4] is not None else [1] * len(starts)
        if (len(v) > 3 and ins[3] is not None and v[3] is None) or (
                len(v) > 4 and ins[4] is not None and v[4] is None):
            return None
        out = list(x)
        for s, e, ax, st in zip(starts, ends, axes, steps):
            ax = int(ax) % rank
            out[ax] = len(range(out[ax])[slice(int(s), int(e), int(st))])
        return [tuple(out)]
    if op == "Gather" and len(ins) > 1 and ins[1] is not None:
        axis = a.get("axis", 0) % rank
        return [x[:axis] + ins[1] + x[axis + 1:]]
    if op.startswith("Reduce") and op != "ReduceProd":
        axes = _axes(a, v, rank)
        if axes is None:
            if len(ins) > 1 and ins[1] is not None:
                return None
            axes = [] if a.get("noop_with_empty_axes") else list(range(rank))
        keep = a.get("keepdims", 1)
        return [tuple((1 if keep else None) if i in axes else d for i, d in enumerate(x)
                      if keep or i not in axes)]
    if op == "Tile" and len(v) > 1 and v[1] is not None:
        return [tuple(d * int(r) for d, r in zip(x, v[1].tolist()))]
    if op == "Expand" and len(v) > 1 and v[1] is not None:
        return [broadcast(x, tuple(int(d) for d in v[1].tolist()))]
    if op == "ConstantOfShape" and v and v[0] is not None:
        return [tuple(int(d) for d in v[0].reshape(-1).tolist())]
    if op == "TopK" and len(v) > 1 and v[1] is not None and x:
        axis, k = int(a.get("axis", -1)) % len(x), int(v[1].reshape(-1)[0])
        if not 0 <= k <= x[axis]:  # more than the axis holds: the file cannot run
            return None
        values = tuple(k if i == axis else d for i, d in enumerate(x))
        return [values, values]
    return None
