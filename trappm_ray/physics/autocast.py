"""Autocast's dtype rules (``torch.autocast`` on CUDA): which dtype each tensor of a walked graph
has under mixed precision, and what autocast's casts move. The memory model lays tensors out at
these sizes (:meth:`trappm_ray.physics.graph_walk.Walk.intervals`) and the roofline counts their
traffic at them (:func:`trappm_ray.physics.roofline.roofline`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FP32, HALF = 4, 2
# autocast runs these in the lower precision ...
HALF_OPS = {"Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum", "LSTM", "GRU", "RNN"}
# ... these in fp32 on an fp32 copy of their inputs (its "fp32" list) ...
FP32_OPS = {"LayerNormalization", "GroupNormalization", "Pow", "Exp", "Log", "Softplus",
            "Reciprocal", "ReduceLogSumExp"}
# ... and these with an fp32 result but no copy of the input (its "fp32_set_opt_dtype" and
# "fp32_append_dtype" lists: softmax, sums, norms get ``dtype=float32``). Pointwise ops follow
# their inputs; these take the widest of them (type promotion).
FP32_RESULT_OPS = {"Softmax", "LogSoftmax", "ReduceSum", "ReduceProd", "ReduceL1", "ReduceL2",
                   "ReduceSumSquare", "CumSum"}
PROMOTE_OPS = {"Add", "Sub", "Mul", "Div", "Concat", "Where", "Max", "Min", "Sum", "Mean"}


@dataclass
class Dtypes:
    """Autocast's dtypes of one walked graph (:func:`dtypes`).

    Attributes:
        bytes: bytes per element of every tensor (index ``num_nodes``: the data input).
        target: per node, the dtype (bytes) autocast casts its inputs to, None where it casts none.
        casts: per node, the bytes its casts move (each input of another dtype read and its
            copy written, at every call).
    """

    bytes: np.ndarray
    target: list
    casts: np.ndarray


def dtypes(ops: list, preds: list, fused: np.ndarray, elems: np.ndarray, real: np.ndarray,
           act_bytes: int = FP32, low_bytes: int | None = None) -> Dtypes:
    """Bytes per element of every tensor under autocast's rules: an op of :data:`HALF_OPS` runs in
    ``low_bytes``, one of :data:`FP32_OPS` in fp32, each on a copy of any input of another dtype;
    :data:`FP32_RESULT_OPS` return fp32; :data:`PROMOTE_OPS` take the widest input; other ops
    (and fused chains) follow their first input. So an fp32 residual stream (the image, an
    embedding table's rows, a LayerNorm's output) stays fp32 through its Adds while the GEMMs
    between run in half, each on its own copy (autocast caches only the weights' copies).

    Args:
        ops, preds, fused, elems, real: a walk's op types, data inputs per node, fused-chain
            flags, elements and allocated flags per tensor (:class:`~trappm_ray.physics.graph_walk.Walk`).
        act_bytes: bytes per element of the data input and of ops outside autocast's lists.
        low_bytes: autocast's lower precision (2) or None without autocast: every tensor at ``act_bytes``.
    """
    n = len(ops)
    dt = [float(act_bytes)] * (n + 1)
    target: list[float | None] = [None] * n
    casts = np.zeros(n)
    if low_bytes is not None:
        for i in range(n):
            op, ps = ops[i], preds[i]
            if fused[i]:
                dt[i] = dt[ps[0]] if ps else act_bytes
            elif op in HALF_OPS:
                target[i] = dt[i] = low_bytes
            elif op in FP32_OPS:
                target[i] = dt[i] = FP32
            elif op in FP32_RESULT_OPS:
                dt[i] = FP32
            else:
                dt[i] = max((dt[p] for p in ps), default=act_bytes) if (
                    op in PROMOTE_OPS) else (dt[ps[0]] if ps else act_bytes)
            if target[i] is not None:
                casts[i] = sum(elems[p] * (dt[p] + dt[i]) for p in ps if real[p] and dt[p] != dt[i])
    found = Dtypes(np.array(dt), target, casts)
    found.bytes.flags.writeable = found.casts.flags.writeable = False
    return found


__all__ = ["FP32", "FP32_OPS", "FP32_RESULT_OPS", "HALF", "HALF_OPS", "PROMOTE_OPS", "Dtypes", "dtypes"]
