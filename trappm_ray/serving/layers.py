"""A per-layer breakdown of a prediction: parameters, MACs, activation memory and each layer's
share of the GPU's time, top layers first (``--layers``).

Layers are the exporter's module scopes (``/layer1/layer1.0/conv1/Conv`` belongs to
``layer1/layer1.0``): the shallowest depth of the scope path that splits the graph into at least
:data:`MIN_GROUPS` groups, at most :data:`MAX_DEPTH` deep. A file without scoped node names groups
by operator type. Time shares come from the step model's forward kernels on the GPU answered for
(the backward follows the forward's shares); on a CPU from the MACs.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from trappm_ray import devices
from trappm_ray.graph.featurize import VIEW_OPS, Graph
from trappm_ray.physics.step_model import node_device_us

MIN_GROUPS, MAX_DEPTH = 8, 4


def _scope(name: str) -> list[str]:
    parts = [p for p in name.split("/") if p]
    return parts[:-1] if len(parts) > 1 else []


def layer_of(graph: Graph) -> list[str]:
    """Each node's layer: its scope path cut at the chosen depth, else its operator type."""
    names = graph.derived.get("node_names") or []
    scopes = [_scope(n) for n in names] if len(names) == graph.num_nodes else []
    if not any(scopes):
        return list(graph.ops)
    depth = next((d for d in range(1, MAX_DEPTH + 1)
                  if len({"/".join(s[:d]) for s in scopes if s}) >= MIN_GROUPS), MAX_DEPTH)
    return ["/".join(s[:depth]) if s else op for s, op in zip(scopes, graph.ops)]


def breakdown(graph: Graph, spec: devices.DeviceSpec | None, precision: str, top: int) -> list[dict]:
    """The ``top`` layers by share of the step's time (by MACs without a GPU spec)."""
    if spec is not None:
        weight = node_device_us(graph, spec, precision)
    else:
        weight = np.asarray(graph.macs, np.float64)
    total = float(weight.sum()) or 1.0
    rows: dict[str, dict] = defaultdict(lambda: {"params": 0.0, "macs": 0.0, "activation_mb": 0.0, "share": 0.0})
    for layer, op, p, m, b, w in zip(layer_of(graph), graph.ops, graph.params, graph.macs, graph.out_bytes, weight):
        r = rows[layer]
        r["params"] += float(p)
        r["macs"] += float(m)
        r["activation_mb"] += 0.0 if op in VIEW_OPS else float(b) / 2**20
        r["share"] += float(w) / total
    ranked = sorted(rows.items(), key=lambda kv: -kv[1]["share"])[:top]
    return [{"layer": k, **v} for k, v in ranked]


__all__ = ["MIN_GROUPS", "MAX_DEPTH", "layer_of", "breakdown"]
