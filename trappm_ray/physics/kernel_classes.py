"""What kind of kernel each node of a graph runs, and how a step's GPU time splits among them.

The step model (:mod:`trappm_ray.physics.step_model`) runs every kernel at one achievable share
of the peaks. Real libraries reach different shares per kind of kernel: cuDNN's dense
convolutions come close to the model, grouped convolutions and data movement far less. How far
a step may sit from the step model therefore depends on what its time is spent on: the
:func:`device_shares` of a graph are what a learned correction is bounded by
(:mod:`trappm_ray.model.correction`), so a model built only of dense convolutions cannot be
read 7x slower than physics because some grouped-convolution family once was.
The :func:`layout_shares` split the same time by what decides a kernel's speed in channels-last
layout (:mod:`trappm_ray.model.layout`).
"""
from __future__ import annotations

import numpy as np

from trappm_ray import devices
from trappm_ray.physics.graph_walk import NORM_OPS, POINTWISE, kept
from trappm_ray.physics.step_model import node_device_us
from trappm_ray.physics.units import MATMUL_OPS, TENSOR, node_classes

# Kernel classes in a fixed order (a bound's coefficients follow it).
CLASSES = ("conv", "grouped-conv", "depthwise-conv", "matmul", "reduction", "pointwise", "data-movement")
CONV_OPS = {"Conv", "ConvTranspose"}
# Normalizations, softmax and reductions: a pass over a row or channel, reading it at least twice.
REDUCTION_OPS = NORM_OPS | {"Softmax", "LogSoftmax", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin",
                            "ReduceL2", "ReduceProd", "ReduceSumSquare", "ReduceLogSumExp", "CumSum",
                            "LpNormalization", "TopK", "ArgMax", "ArgMin"}
# Elementwise work on one tensor's layout: activations, arithmetic, resampling, pooling.
POINTWISE_OPS = POINTWISE | {"Resize", "Upsample", "MaxPool", "AveragePool", "GlobalAveragePool",
                             "GlobalMaxPool", "LpPool", "Where", "Not", "And", "Or", "Equal", "Less",
                             "Greater", "Dropout", "Cast", "CastLike", "PRelu", "Selu", "Softsign",
                             "ThresholdedRelu", "Shrink", "Mod", "Sum", "Mean"}


def kernel_class(op: str, unit: int, groups: int) -> int:
    """Index into :data:`CLASSES` of a node of type ``op`` on ``unit`` (a
    :func:`~trappm_ray.physics.units.node_classes` value) with ``groups`` convolution groups;
    anything else (concatenation, slicing, gathers, padding, copies) moves data."""
    if op in CONV_OPS:
        return CLASSES.index("conv" if groups <= 1 else "grouped-conv" if unit == TENSOR else "depthwise-conv")
    if op in MATMUL_OPS:
        return CLASSES.index("matmul")
    if op in REDUCTION_OPS:
        return CLASSES.index("reduction")
    if op in POINTWISE_OPS:
        return CLASSES.index("pointwise")
    return CLASSES.index("data-movement")


def device_shares(graph, spec: devices.DeviceSpec, precision: str) -> np.ndarray:
    """Each class's share of the forward pass's GPU time in the step model (sums to 1; a graph
    of no GPU work: all pointwise). The backward mirrors the forward kernel by kernel, so the
    training step's shares are these."""
    return kept(graph, ("device_shares", spec.slug, precision), lambda: _device_shares(graph, spec, precision))


def _split(time: np.ndarray, kinds: list[int], n: int, empty: int) -> np.ndarray:
    """Shares of the total of per-node ``time`` by each node's kind (of ``n``); no time at all:
    everything in kind ``empty``."""
    out = np.bincount(np.asarray(kinds, np.int64), weights=np.maximum(time, 0.0), minlength=n) if kinds else np.zeros(n)
    total = out.sum()
    return out / total if total > 0 else np.eye(n)[empty]


def _device_shares(graph, spec: devices.DeviceSpec, precision: str) -> np.ndarray:
    unit = node_classes(graph)
    groups = np.maximum(np.asarray(graph.attrs)[:, 2], 1) if graph.num_nodes else np.zeros(0)
    kinds = [kernel_class(op, int(u), int(g)) for op, u, g in zip(graph.ops, unit, groups)]
    return _split(node_device_us(graph, spec, precision), kinds, len(CLASSES), CLASSES.index("pointwise"))


# Kinds of kernel whose speed changes with the memory layout (channels-last vs NCHW), in a fixed
# order: the libraries pick a different kernel per layout by how a convolution groups its channels
# (a depthwise one, a grouped one of few or many channels per group) and its window, and group
# normalizations (exported as InstanceNormalization over reshaped groups) run through another path.
LAYOUT_KINDS = ("dense-conv", "depthwise-conv", "depthwise-conv-large-window", "grouped-conv-narrow",
                "grouped-conv-mid", "grouped-conv-wide", "group-norm", "other")
LARGE_WINDOW = 81  # a 9x9 window or larger
NARROW, MID = 4, 16  # channels per group: up to NARROW, up to MID, wider


def layout_kind(op: str, groups: int, channels: int, window: int) -> int:
    """Index into :data:`LAYOUT_KINDS` of a node of type ``op`` with ``groups`` convolution groups
    over ``channels`` input channels and a ``window`` of that many taps."""
    if op in CONV_OPS:
        per_group = channels / max(groups, 1)
        if groups <= 1:
            return 0
        if per_group <= 1:
            return 2 if window >= LARGE_WINDOW else 1
        return 3 if per_group <= NARROW else 4 if per_group <= MID else 5
    return 6 if op in ("InstanceNormalization", "GroupNormalization") else 7


def layout_shares(graph, spec: devices.DeviceSpec, precision: str) -> np.ndarray:
    """Each :data:`LAYOUT_KINDS` kind's share of the forward pass's GPU time in the step model
    (sums to 1; a graph of no GPU work: all "other")."""
    return kept(graph, ("layout_shares", spec.slug, precision), lambda: _layout_shares(graph, spec, precision))


def _layout_shares(graph, spec: devices.DeviceSpec, precision: str) -> np.ndarray:
    attrs = np.asarray(graph.attrs).reshape(-1, 3)
    channels = np.asarray(graph.in_shape).reshape(len(attrs), -1)[:, 1] if len(attrs) else np.zeros(0)
    kinds = [layout_kind(op, int(groups), int(c), int(window)) for op, (window, _, groups), c in zip(graph.ops, attrs, channels)]
    return _split(node_device_us(graph, spec, precision), kinds, len(LAYOUT_KINDS), len(LAYOUT_KINDS) - 1)


__all__ = ["CLASSES", "LAYOUT_KINDS", "kernel_class", "device_shares", "layout_kind", "layout_shares"]
