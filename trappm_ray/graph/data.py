"""Graph -> PyG ``Data``: the one place a featurized graph becomes network input."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch_geometric.data import Data

from trappm_ray.graph import features
from trappm_ray.graph.featurize import Graph


def graph_data(graph: Graph, feature_set: str = "v2", y: Sequence[float] | None = None) -> Data:
    """A featurized graph as a PyG ``Data``.

    Args:
        graph: the raw graph (:func:`~trappm_ray.graph.featurize.featurize` or a stored row).
        feature_set: ``v2`` or ``trappm-v1`` (see :mod:`trappm_ray.graph.features`).
        y: label values stacked into ``y`` (``[1, T]`` float32); None = no ``y``.

    Returns:
        ``Data`` with ``x`` ``[N, node_dim]``, ``edge_index`` ``[2, E]``, ``static``
        ``[1, static_dim]`` (so that batching stacks one row per graph), ``log_samples``
        ``[1, 1]`` (the natural log of the batch size the graph was exported with; not named
        ``*batch*``, since PyG offsets such attributes like a node-to-graph index when batching)
        and ``num_nodes``.
    """
    fs = features.get(feature_set)
    data = Data(x=torch.from_numpy(features.node_features(graph, fs)),
                edge_index=torch.from_numpy(features.edge_index(graph, fs)),
                static=torch.from_numpy(features.static_features(graph, fs)).unsqueeze(0),
                log_samples=torch.tensor([[float(np.log(graph.static["batch_size"]))]]),
                num_nodes=graph.num_nodes)
    if y is not None:
        data.y = torch.tensor([[float(v) for v in y]], dtype=torch.float32)
    return data
