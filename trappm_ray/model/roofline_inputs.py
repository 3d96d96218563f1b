"""Inputs of the physics-informed GNN: one graph on one device in one run setting.

The network sees the graph with each node's roofline terms on the device appended to its v2
features (:func:`trappm_ray.physics.roofline.node_features`: compute, memory and roofline time of
the operator, its arithmetic intensity over the device's ridge point; Williams et al., CACM 2009)
and, as its static vector, the graph-level features of every device-aware regressor
(:func:`trappm_ray.model.device_features.feature_vector`: v2 static, log roofline terms, the
device's spec vector, the run settings). It predicts log(measured / roofline floor): the part of
a step the hardware's peaks do not explain (launches, framework overheads, cuDNN's kernel choice).
Training (:mod:`trappm_ray.train.gpu_predictor`) and prediction
(:class:`trappm_ray.model.predictor.Predictor` with ``inputs: roofline``) build them here alike.
"""
from __future__ import annotations

import copy

import numpy as np
import torch
from torch_geometric.data import Data

from trappm_ray import devices
from trappm_ray.graph import features
from trappm_ray.graph.data import graph_data
from trappm_ray.model.device_features import feature_names
from trappm_ray.physics.roofline import FEATURE_NAMES, node_features, roofline

INPUTS = "roofline"  # the manifest's ``inputs`` of a predictor fed by this module
NODE_DIM = features.get("v2").node_dim + len(FEATURE_NAMES)
STATIC_DIM = len(feature_names())


def node_data(graph, spec: devices.DeviceSpec, precision: str, torch2: bool, compiled: bool) -> Data:
    """``graph``'s v2 ``Data`` with the per-node roofline features on ``spec`` appended (forward
    pass at ``precision``; fused attention under PyTorch 2, fusion under ``compiled``)."""
    est = roofline(graph, spec, precision, "infer", fused_attention=torch2, compiled=compiled)
    d = graph_data(graph, "v2")
    d.x = torch.cat([d.x, torch.from_numpy(node_features(graph, spec, precision, est))], dim=1)
    return d


def with_static(d: Data, x: np.ndarray) -> Data:
    """A shallow copy of ``d`` (its tensors shared: examples of one graph in several settings
    cost one graph) whose static vector is ``x``."""
    d = copy.copy(d)
    d.static = torch.tensor(np.asarray(x), dtype=torch.float32).unsqueeze(0)
    return d


__all__ = ["INPUTS", "NODE_DIM", "STATIC_DIM", "node_data", "with_static"]
