"""A stored predictor's networks evaluated in NumPy: what serving runs.

Training builds the networks in PyTorch (:mod:`trappm_ray.model.networks`); answering with them
needs only their forward pass in eval mode: a few matrix products per layer, a mean over each
node's in-neighbours, a sum per graph. Done here in NumPy, a prediction loads no torch (about 2 s
and 650 MB on a 2-core machine) and no PyTorch Geometric (3 s more). The arithmetic follows the
PyTorch modules layer for layer in float32 (the target's scale in float64, as there), so the two
answer alike to float32 rounding (``tests/model/test_forward.py`` holds them to 1e-5).

The layers (weights under the PyTorch modules' state-dict names):

* GraphSAGE layer (Hamilton et al., NeurIPS 2017; PyG's ``SAGEConv``, mean aggregation):
  ``lin_l(mean of in-neighbours) + lin_r(self)``;
* the TraPPM encoder: SAGE layers, each but the last followed by BatchNorm (running statistics)
  and ReLU; its node embeddings summed per graph;
* the per-target regressor: two SAGE layers with ReLU, summed per graph, then
  ``[pooled, embedding, static] -> FC -> FC -> out`` (``batch_affine``: the value at a reference
  batch size and the share of it growing with the batch);
* the static MLP blended with it (:mod:`trappm_ray.model.static_mlp`).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import sparse

from trappm_ray.graph.arrays import GraphArrays
from trappm_ray.model.manifest import Manifest

BN_EPS = 1e-5  # torch.nn.BatchNorm1d's default, as the encoder was trained with


def _linear(w: dict[str, np.ndarray], name: str, x: np.ndarray) -> np.ndarray:
    out = x @ w[f"{name}.weight"].T
    return out + w[f"{name}.bias"] if f"{name}.bias" in w else out


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0, dtype=x.dtype)


class Batch:
    """Several graphs as one: nodes stacked, edges offset, each node's graph known.

    The node features of the graphs at hand are mostly zero columns (a graph uses a few of the
    op one-hot columns): :attr:`cols` lists the others, and a layer on the raw features reads
    those alone (:func:`sage` with ``cols``), the same sum without its zero terms.

    Args:
        graphs: the graphs' arrays (:mod:`trappm_ray.graph.arrays`).
    """

    # The structure of the last batch, kept while its graphs' arrays are the same objects: a
    # predictor asks once per target for the same graphs with another static vector.
    _last: tuple = ()

    def __init__(self, graphs: Sequence[GraphArrays]):
        arrays = tuple((g.x, g.edge_index) for g in graphs)
        last = Batch._last
        if len(last) == 2 and len(last[0]) == len(arrays) and all(
                a is b and e is f for (a, e), (b, f) in zip(arrays, last[0])):
            self.x, self.cols, self.x_cols, self.adjacency, self.in_degree, self.membership = last[1]
        else:
            self._structure(graphs)
            Batch._last = (arrays, (self.x, self.cols, self.x_cols, self.adjacency, self.in_degree, self.membership))
        self.static = np.stack([g.static for g in graphs]).astype(np.float32, copy=False)
        self.log_samples = np.array([[g.log_samples] for g in graphs], dtype=np.float32)

    def _structure(self, graphs: Sequence[GraphArrays]) -> None:
        sizes = [g.num_nodes for g in graphs]
        offsets = np.cumsum([0] + sizes[:-1])
        self.x = np.concatenate([g.x for g in graphs]).astype(np.float32, copy=False)
        self.cols = np.flatnonzero(np.any(self.x != 0, axis=0))
        self.x_cols = np.ascontiguousarray(self.x[:, self.cols])
        edges = np.concatenate([g.edge_index + o for g, o in zip(graphs, offsets)], axis=1)
        src, dst = edges[0], edges[1]
        n = len(self.x)
        # sums over in-neighbours and over each graph's nodes as sparse products (scipy's CSR:
        # ten times faster than numpy's scatter-adds on a batch of graphs)
        self.adjacency = sparse.csr_matrix((np.ones(len(src), np.float32), (dst, src)), shape=(n, n))
        self.in_degree = np.maximum(np.asarray(self.adjacency.sum(axis=1), dtype=np.float32), 1)
        graph = np.repeat(np.arange(len(graphs)), sizes)
        self.membership = sparse.csr_matrix((np.ones(n, np.float32), (graph, np.arange(n))), shape=(len(graphs), n))

    def neighbor_mean(self, h: np.ndarray) -> np.ndarray:
        """Mean of each node's in-neighbours' rows of ``h`` (zeros for none)."""
        return np.asarray(self.adjacency @ h) / self.in_degree

    def pool(self, h: np.ndarray) -> np.ndarray:
        """Sum of ``h``'s rows per graph, ``[num_graphs, d]``."""
        return np.asarray(self.membership @ h)


def sage(w: dict[str, np.ndarray], name: str, b: Batch, h: np.ndarray, agg: np.ndarray | None = None,
         cols: np.ndarray | None = None) -> np.ndarray:
    """One GraphSAGE layer ``name`` on node rows ``h`` (``agg``: their neighbour mean, if known;
    ``cols``: the input columns ``h`` and ``agg`` hold, of the layer's inputs, the rest zero)."""
    agg = b.neighbor_mean(h) if agg is None else agg
    if cols is None:
        return _linear(w, f"{name}.lin_l", agg) + _linear(w, f"{name}.lin_r", h)
    out = agg @ w[f"{name}.lin_l.weight"][:, cols].T + h @ w[f"{name}.lin_r.weight"][:, cols].T
    for bias in (f"{name}.lin_l.bias", f"{name}.lin_r.bias"):
        out = out + w[bias] if bias in w else out
    return out


def encoder_embedding(w: dict[str, np.ndarray], prefix: str, layers: int, b: Batch) -> np.ndarray:
    """The frozen encoder's node embeddings summed per graph, ``[num_graphs, out_dim]``."""
    h = b.x_cols
    for i in range(layers):
        h = sage(w, f"{prefix}convs.{i}", b, h, cols=b.cols if i == 0 else None)
        if i < layers - 1:
            bn = f"{prefix}norms.{i}.module."
            h = (h - w[bn + "running_mean"]) / np.sqrt(w[bn + "running_var"] + np.float32(BN_EPS))
            h = _relu(h * w[bn + "weight"] + w[bn + "bias"])
    return b.pool(h)


def regressor(w: dict[str, np.ndarray], prefix: str, b: Batch, static_z: np.ndarray,
              emb_z: np.ndarray | None, agg: np.ndarray) -> np.ndarray:
    """One regressor's output ``[num_graphs, 1]`` in the target scaler's z units.

    Args:
        static_z, emb_z: the scaled static vectors and pooled embeddings (None: no embedding).
        agg: the neighbour mean of the node features' :attr:`Batch.cols` (shared by every head).
    """
    h = _relu(sage(w, f"{prefix}conv1", b, b.x_cols, agg, b.cols))
    h = _relu(sage(w, f"{prefix}conv2", b, h))
    parts = [b.pool(h)] + ([emb_z] if emb_z is not None else []) + [static_z]
    h = _relu(_linear(w, f"{prefix}fc1", np.concatenate(parts, axis=1)))
    h = _relu(_linear(w, f"{prefix}fc2", h))
    out = _linear(w, f"{prefix}out", h)
    if out.shape[1] == 1:
        return out
    # batch_affine: y(B) = y(ref) * (1 - r + r * B / ref), as Regressor.readout computes it
    share = 1 / (1 + np.exp(-out[:, 1:]))
    ratio = np.exp(b.log_samples - w[f"{prefix}log_samples_ref"])
    return out[:, :1] + np.log1p(share * (ratio - 1)) / w[f"{prefix}y_std"]


def static_mlp(w: dict[str, np.ndarray], prefix: str, static: np.ndarray) -> np.ndarray:
    """A static MLP's log predictions ``[num_graphs]`` (float64) of raw static vectors."""
    z = ((static.astype(np.float64) - w[prefix + "x_mean"]) / w[prefix + "x_std"]).astype(np.float32)
    h = _relu(_linear(w, f"{prefix}net.0", z))
    h = _relu(_linear(w, f"{prefix}net.2", h))
    out = _linear(w, f"{prefix}net.4", h)[:, 0].astype(np.float64) * w[prefix + "y_std"] + w[prefix + "y_mean"]
    return np.clip(out, w[prefix + "log_lo"], w[prefix + "log_hi"])


def signed_log(t: np.ndarray) -> np.ndarray:
    return np.sign(t) * np.log1p(np.abs(t))


# The last embedding made from graphs given apart from the networks' inputs, kept while they are
# the same objects: a predictor asks once per target for the same graphs (as Batch keeps its
# structure), and the encoder does not depend on the target.
_last_embedding: list = []


def _embedding_of(w: dict[str, np.ndarray], layers: int, graphs: Sequence[GraphArrays]) -> np.ndarray:
    """:func:`encoder_embedding` of ``graphs``, reused while the weights and graphs are the same."""
    arrays = (w, *(g.x for g in graphs))
    if _last_embedding and len(_last_embedding[0]) == len(arrays) and all(
            a is b for a, b in zip(arrays, _last_embedding[0])):
        return _last_embedding[1]
    emb = encoder_embedding(w, "encoder.", layers, Batch(graphs))
    _last_embedding[:] = [arrays, emb]
    return emb


def predict(manifest: Manifest, w: dict[str, np.ndarray], graphs: Sequence[GraphArrays],
            targets: Sequence[str] | None = None, encoder_graphs: Sequence[GraphArrays] | None = None
            ) -> dict[str, np.ndarray]:
    """Per target (default: every one the manifest names): ``[G, S]`` predictions (graphs x seeds)
    in the network's unit, as :meth:`trappm_ray.model.predictor.Predictor.predict_data` gives them.

    ``encoder_graphs``: the same graphs in the feature set the encoder reads, where the networks'
    own node inputs are others (``roofline`` inputs); None: ``graphs`` themselves."""
    net = manifest.net
    emb = None
    if net.encoder and encoder_graphs is not None:
        emb = _embedding_of(w, len(net.encoder["dims"]), encoder_graphs)
    b = Batch(graphs)
    if net.encoder and encoder_graphs is None:
        emb = encoder_embedding(w, "encoder.", len(net.encoder["dims"]), b)
    agg = b.neighbor_mean(b.x_cols)
    blend = (net.blend or {}).get("weights", {})
    out = {}
    for target in targets or manifest.targets:
        cols = []
        for seed in net.seeds:
            sc = f"scaler.{target}.{seed}."
            static_z = (b.static - w[sc + "static_mean"]) / w[sc + "static_std"]
            emb_z = (None if emb is None or w[sc + "emb_mean"].size == 0
                     else (signed_log(emb) - w[sc + "emb_mean"]) / w[sc + "emb_std"])
            z = regressor(w, f"head.{target}.{seed}.", b, static_z, emb_z, agg).astype(np.float64)
            y_mean, y_std = w[sc + "y"]
            col = np.exp(z * y_std + y_mean)
            share = blend.get(target, 1.0)
            if share < 1:  # log(ratio) = w log(network) + (1 - w) log(MLP), per seed
                mlp = static_mlp(w, f"mlp.{target}.{seed}.", b.static)
                col = np.exp(share * np.log(np.maximum(col, 1e-6)) + (1 - share) * mlp[:, None])
            cols.append(col)
        out[target] = np.concatenate(cols, axis=1)
    return out


__all__ = ["BN_EPS", "Batch", "sage", "encoder_embedding", "regressor", "static_mlp", "signed_log", "predict"]
