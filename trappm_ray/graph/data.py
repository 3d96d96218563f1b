"""Network input as a PyG ``Data``, for training and for networks run in PyTorch."""
from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import torch
from torch_geometric.data import Data

from trappm_ray.graph.arrays import GraphArrays, graph_arrays
from trappm_ray.graph.featurize import Graph


def to_data(a: GraphArrays, y: Sequence[float] | None = None) -> Data:
    """``a`` as a PyG ``Data``: ``x`` ``[N, node_dim]``, ``edge_index`` ``[2, E]``, ``static``
    ``[1, static_dim]`` (so that batching stacks one row per graph), ``log_samples`` ``[1, 1]``
    (not named ``*batch*``, since PyG offsets such attributes like a node-to-graph index when
    batching), ``num_nodes`` and, where given, the labels ``y`` (``[1, T]`` float32)."""
    data = Data(x=torch.from_numpy(a.x), edge_index=torch.from_numpy(a.edge_index),
                static=torch.from_numpy(np.asarray(a.static, dtype=np.float32)).unsqueeze(0),
                log_samples=torch.tensor([[a.log_samples]]), num_nodes=a.num_nodes)
    if y is not None:
        data.y = torch.tensor([[float(v) for v in y]], dtype=torch.float32)
    return data


def graph_data(graph: Graph, feature_set: str = "v2", y: Sequence[float] | None = None) -> Data:
    """A featurized graph as a PyG ``Data`` (:func:`~trappm_ray.graph.arrays.graph_arrays`, :func:`to_data`)."""
    return to_data(graph_arrays(graph, feature_set), y)


def with_static(d: Data, x: np.ndarray) -> Data:
    """A shallow copy of ``d`` (its tensors shared) whose static vector is ``x``."""
    d = copy.copy(d)
    d.static = torch.tensor(np.asarray(x), dtype=torch.float32).unsqueeze(0)
    return d


__all__ = ["to_data", "graph_data", "with_static"]
