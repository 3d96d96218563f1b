"""Graph -> network input as NumPy arrays: the one place a featurized graph becomes what a
network reads (:func:`trappm_ray.graph.data.to_data` wraps these arrays for PyTorch Geometric).

Serving evaluates the networks in NumPy (:mod:`trappm_ray.model.forward`), so it builds its
inputs here without importing torch.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from trappm_ray.graph import features
from trappm_ray.graph.featurize import Graph


@dataclass(frozen=True)
class GraphArrays:
    """One graph as a network reads it.

    Attributes:
        x: ``[N, node_dim]`` float32 node features.
        edge_index: ``[2, E]`` int64 (source row, target row).
        static: ``[static_dim]`` float32 graph-level features.
        log_samples: natural log of the batch size the graph was exported with.
    """

    x: np.ndarray
    edge_index: np.ndarray
    static: np.ndarray
    log_samples: float

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])

    def with_static(self, static: np.ndarray) -> GraphArrays:
        """The same graph (its arrays shared) with another static vector: the examples of one
        graph in several settings cost one graph."""
        return dataclasses.replace(self, static=np.asarray(static, dtype=np.float32))

    def with_node_columns(self, cols: np.ndarray) -> GraphArrays:
        """The graph with ``cols`` (``[N, k]``) appended to every node's features."""
        return dataclasses.replace(self, x=np.concatenate([self.x, cols.astype(np.float32)], axis=1))


def graph_arrays(graph: Graph, feature_set: str = "v2") -> GraphArrays:
    """``graph`` (:func:`~trappm_ray.graph.featurize.featurize` or a stored row) in ``feature_set``
    (``v2`` or ``trappm-v1``, :mod:`trappm_ray.graph.features`)."""
    fs = features.get(feature_set)
    return GraphArrays(x=features.node_features(graph, fs), edge_index=features.edge_index(graph, fs),
                       static=features.static_features(graph, fs),
                       log_samples=float(np.log(graph.static["batch_size"])))


__all__ = ["GraphArrays", "graph_arrays"]
