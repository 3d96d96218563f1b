"""Which Convs of an exported graph carry a BatchNorm folded in by an eval-mode export.

An eval-mode ONNX export folds each BatchNorm into the Conv before it; training runs the two
apart, so the memory model and the roofline restore the BatchNorm's tensors and traffic for the
Convs these masks name: :func:`folded_norm_mask` from the exporter's weight names where the file
is at hand, :func:`guess_folded_norm` from the graph alone.
"""
from __future__ import annotations

import numpy as np

from trappm_ray.physics.graph_walk import NORM_OPS, kept


def guess_folded_norm(graph) -> np.ndarray:
    """Guess which Convs carry a BatchNorm folded in by an eval-mode export, from the graph.

    A Conv with a bias input and a spatial output that feeds no normalization (directly or via a
    transpose/reshape, as LayerNorm2d and patch embeddings do) is taken to be Conv+BN. Wrong for
    networks of biased convs without normalization (VGG): prefer :func:`folded_norm_mask`.
    Kept in ``graph.derived`` (read-only): every pass of a prediction asks.
    """
    return kept(graph, "folded_norm_guess", lambda: _guess_folded_norm(graph))


def _guess_folded_norm(graph) -> np.ndarray:
    n = graph.num_nodes
    norm_next = np.zeros(n, bool)
    src, dst = graph.edge_index
    for s, d in zip(src.tolist(), dst.tolist()):
        if graph.ops[d] in NORM_OPS or graph.ops[d] in ("Transpose", "Reshape", "Flatten"):
            norm_next[s] = True
    spatial = np.asarray(graph.out_shape)[:, 2:4].prod(axis=1) > 1
    is_conv = np.array([op == "Conv" for op in graph.ops], bool)
    guess = is_conv & (np.asarray(graph.n_in) >= 3) & spatial & ~norm_next
    guess.flags.writeable = False
    return guess


def folded_norm_mask(model) -> np.ndarray:
    """Per node (featurize's order), True where a Conv's weight was made by folding a BatchNorm.

    PyTorch's ONNX exporter folds eval-mode BatchNorm into the preceding Conv and names the new
    weight ``onnx::Conv_<n>``; weights it kept carry their module path (``layer1.0.conv1.weight``).

    Args:
        model: an ``onnx.ModelProto`` or a path to one.
    """
    import onnx

    from trappm_ray.graph.featurize import topological_order

    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model), load_external_data=False)
    nodes = model.graph.node
    order = topological_order(nodes)
    return np.array([nodes[k].op_type == "Conv" and len(nodes[k].input) > 1
                     and nodes[k].input[1].startswith("onnx::Conv_") for k in order], bool)


__all__ = ["guess_folded_norm", "folded_norm_mask"]
