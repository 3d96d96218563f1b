"""ONNX shape inference that cannot exhaust memory on hostile graphs.

ONNX's data propagation (``data_prop=True``) follows shape arithmetic that plain inference
cannot, but it materialises every rank-0/1 tensor that reaches a propagating op as a vector of
its length, whatever that length is: ``Mul(x[1], w[10**9])`` allocates 8 GB inside
``infer_shapes``, found by the graph fuzzer. So inference runs first without it, and with it
only when no long (or unknown-length) rank-1 tensor meets such an op; otherwise the bounded
numpy folder (:mod:`trappm_ray.graph.shape_fold`) does the shape arithmetic.
"""
from __future__ import annotations

import itertools
import logging

import onnx

from trappm_ray import errors

log = logging.getLogger(__name__)

# ONNX's data propagation materialises every rank-0/1 tensor reaching these ops as a vector of
# its length (found by fuzzing: Mul(x[1], w[10**9]) allocates 8 GB inside infer_shapes).
DATA_PROP_OPS = {"Add", "Sub", "Mul", "Div", "Cast", "Concat", "Gather", "Slice", "Squeeze",
                 "Unsqueeze", "Shape", "Size", "Reshape", "Identity", "Max", "Min", "Neg", "Abs",
                 "Expand", "Where", "Sum", "Mod", "Equal", "Range", "ConstantOfShape"}
DATA_PROP_MAX_LENGTH = 2**16  # shape vectors are a few entries; anything longer is data


def _data_prop_safe(inferred: onnx.ModelProto) -> bool:
    """False when a rank-0/1 tensor that is long, or of unknown length, meets DATA_PROP_OPS."""
    g = inferred.graph
    # only the tensors such ops read are looked at: reading every value's shape through protobuf
    # took 9 ms of ResNet-101's 12 ms featurize
    wanted = {x for n in g.node if n.op_type in DATA_PROP_OPS for x in n.input}
    rank1: dict[str, int | None] = {}
    for vi in itertools.chain(g.input, g.value_info, g.output):
        if vi.name not in wanted:
            continue
        tt = vi.type.tensor_type
        if tt.HasField("shape") and len(tt.shape.dim) <= 1:
            d = tt.shape.dim
            rank1[vi.name] = d[0].dim_value if d and d[0].HasField("dim_value") else (
                1 if not d else None)
    for t in g.initializer:
        if t.name in wanted and len(t.dims) <= 1:
            rank1[t.name] = t.dims[0] if t.dims else 1
    return not any(n is None or n > DATA_PROP_MAX_LENGTH for n in rank1.values())


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """ONNX shape inference; with data propagation only where that cannot blow up memory.

    A first pass without it gives the ranks and lengths that :func:`_data_prop_safe` checks;
    where it is unsafe, the numpy folder (bounded, see shape_fold) does the shape arithmetic.
    """
    try:
        first = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=True,
                                                  data_prop=False)
        if not _data_prop_safe(first):
            log.debug("data propagation skipped: a long rank-1 tensor meets a propagating op")
            return first
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=True,
                                                 data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError,
            ValueError, TypeError, UnicodeDecodeError) as e:  # the C++ checker's view of bad input
        msg = str(e).strip().splitlines()[0] if str(e).strip() else e.__class__.__name__
        raise errors.UnsupportedConstruct(f"shape inference failed: {msg[:300]}") from None
    except MemoryError:  # a case _data_prop_safe does not know yet: bounded by RLIMIT_AS only
        raise errors.TooLarge("shape inference ran out of memory") from None
