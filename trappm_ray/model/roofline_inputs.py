"""Inputs of the physics-informed GNN: one graph on one device in one run setting.

The network sees the graph with each node's roofline terms on the device appended to its v2
features (:func:`trappm_ray.physics.roofline.node_features`: compute, memory and roofline time of
the operator, its arithmetic intensity over the device's ridge point; Williams et al., CACM 2009)
and, as its static vector, the graph-level features of every device-aware regressor
(:func:`trappm_ray.model.device_features.feature_vector`: v2 static, log roofline terms, the
device's spec vector, the run settings). It predicts log(measured / roofline floor): the part of
a step the hardware's peaks do not explain (launches, framework overheads, cuDNN's kernel choice).
Training (:mod:`trappm_ray.train.gpu_predictor`) and prediction
(:mod:`trappm_ray.model.forward` with ``inputs: roofline``) build them here alike.
"""
from __future__ import annotations

from trappm_ray import devices
from trappm_ray.graph import features
from trappm_ray.graph.arrays import GraphArrays, graph_arrays
from trappm_ray.model.device_features import feature_names
from trappm_ray.physics.roofline import FEATURE_NAMES, node_features, roofline

INPUTS = "roofline"  # the manifest's ``inputs`` of a predictor fed by this module
NODE_DIM = features.get("v2").node_dim + len(FEATURE_NAMES)
STATIC_DIM = len(feature_names())


def node_arrays(graph, spec: devices.DeviceSpec, precision: str, torch2: bool, compiled: bool,
                own: GraphArrays | None = None) -> GraphArrays:
    """``graph``'s v2 arrays (``own`` where the caller has them) with the per-node roofline
    features on ``spec`` appended (forward pass at ``precision``; fused attention under PyTorch 2,
    fusion under ``compiled``); its static vector is set per setting with
    :meth:`~trappm_ray.graph.arrays.GraphArrays.with_static`."""
    est = roofline(graph, spec, precision, "infer", fused_attention=torch2, compiled=compiled)
    base = own if own is not None else graph_arrays(graph, "v2")
    return base.with_node_columns(node_features(graph, spec, precision, est))


__all__ = ["INPUTS", "NODE_DIM", "STATIC_DIM", "node_arrays"]
