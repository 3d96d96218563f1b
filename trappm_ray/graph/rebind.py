"""Re-binding the batch size of a file exported with a fixed batch.

Most public ONNX files have their batch fixed (usually at 1): the data input is ``[1, 3, 224,
224]`` and the classifier's ``Reshape`` target is the constant ``[1, 25088]``. Changing the
input's leading dimension alone leaves such targets at the old batch, and shape inference then
fails (ShuffleNet's channel shuffle: ``Reshape`` to ``[1, 4, 28, 56, 56]`` feeding a ``Concat``
with a batch-32 branch) or, worse, succeeds with part of the graph still at batch 1.

A constant target is re-bound only where it provably carries the batch, judged on the shapes
inferred at the exported batch: its first entry equals the exported batch, the tensor it
reshapes (or expands) is computed from the data (not a constant), has that batch as its own
leading dimension, and (for ``Reshape``) keeps the same number of elements per sample. Anything
else is left alone; :func:`check_rebound` afterwards refuses results where an output did not
follow the new batch.
"""
from __future__ import annotations

import logging
import math

import numpy as np
import onnx
from onnx import numpy_helper

from trappm_ray import errors

log = logging.getLogger(__name__)
_MAX_TARGET = 64  # a shape target has one entry per dimension


def _constant_targets(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Small 1-D integer constants (initializers and Constant nodes) by tensor name."""
    out = {}
    tensors = [(t.name, t) for t in model.graph.initializer]
    tensors += [(n.output[0], a.t) for n in model.graph.node
                if n.op_type == "Constant" and n.output for a in n.attribute if a.name == "value"]
    for name, t in tensors:
        if (t.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) and len(t.dims) == 1
                and 0 < t.dims[0] <= _MAX_TARGET
                and t.data_location != onnx.TensorProto.EXTERNAL):
            try:
                out[name] = numpy_helper.to_array(t).astype(np.int64)
            except (ValueError, TypeError):  # malformed: not a target we can use
                continue
    return out


def rebind_batch(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]],
                 constants: set[str], exported: int, batch: int) -> list[str]:
    """Point batch-carrying constant Reshape/Expand targets at ``batch``, in place.

    Args:
        model: the model, its data inputs still bound at ``exported``.
        shapes: every tensor's shape inferred at the exported batch.
        constants: names of tensors that do not depend on the data (weights, constants).
        exported: the batch the file was exported with.
        batch: the batch size wanted.

    Returns the names of the nodes whose target was re-bound.
    """
    targets = _constant_targets(model)
    new_inits, changed = [], []
    for node in model.graph.node:
        if node.op_type not in ("Reshape", "Expand") or len(node.input) < 2:
            continue
        src, tgt = node.input[0], node.input[1]
        value = targets.get(tgt)
        x, out = shapes.get(src), shapes.get(node.output[0] if node.output else "")
        if value is None or not x or not out or src in constants:
            continue
        if int(value[0]) != exported or x[0] != exported or out[0] != exported:
            continue
        if node.op_type == "Reshape" and math.prod(x[1:]) != math.prod(out[1:]):
            continue  # the batch is folded into another dimension: not only the leading one
        rebound = value.copy()
        rebound[0] = batch
        name = f"{tgt}__batch{batch}__{len(new_inits)}"
        new_inits.append(numpy_helper.from_array(rebound, name))
        node.input[1] = name
        changed.append(node.name or node.output[0])
    model.graph.initializer.extend(new_inits)
    if changed:
        log.debug("re-bound %d shape targets from batch %d to %d", len(changed), exported, batch)
    return changed


def rebind_custom_outputs(model: onnx.ModelProto, exported: int, batch: int) -> None:
    """Declared shapes of custom-domain outputs (which nothing can infer) follow the batch.

    Their leading dimension is taken to be the batch where it equals the exported one, as for
    the data inputs; the check on the graph's outputs still applies afterwards.
    """
    custom = {o for n in model.graph.node if n.domain not in ("", "ai.onnx") for o in n.output}
    for vi in model.graph.value_info:
        dims = vi.type.tensor_type.shape.dim
        if vi.name in custom and dims and dims[0].HasField("dim_value") \
                and dims[0].dim_value == exported:
            dims[0].dim_value = batch


def check_rebound(outputs: dict[str, tuple[int, ...]], shapes: dict[str, tuple[int, ...]],
                  exported: int, batch: int) -> None:
    """Refuse a re-bound result where an output that had the exported batch kept it.

    ``outputs`` maps each graph output to its shape at the exported batch.
    """
    for name, shape0 in outputs.items():
        if not shape0 or shape0[0] != exported:
            continue
        got = shapes.get(name)
        if got is None or not got or got[0] != batch:
            raise errors.FixedBatch(
                f"output '{name}' keeps batch {got[0] if got else '?'} at batch size {batch}: "
                f"the batch size {exported} is baked into the graph beyond what can be re-bound; "
                "export it with a dynamic batch axis, or featurize at the exported batch "
                "(batch_size=None)")
