"""TraPPM's networks: the GraphSAGE encoder, its graph auto-encoder, and the per-target regressor.

Reference: TraPPM (training characteristics performance predictive model), phase 1 pretrains a
graph auto-encoder on unlabeled ONNX graphs, phase 2 trains one GraphSAGE regressor per target
on node features + the sum-pooled frozen GAE embedding + static features. Published sizes:
encoder 113->1024->512->512->512 (BatchNorm, ReLU, dropout 0.5), regressor 2 x SAGEConv 512,
FC 512 -> FC 512 -> 1 (dropout 0.05). Every size here is an argument so that CPU tests can use
small ones.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch_geometric import nn as pygnn
from torch_geometric.utils import (batched_negative_sampling, negative_sampling, scatter,
                                   to_undirected)

PAPER_ENCODER_DIMS = (1024, 512, 512, 512)


class GraphEncoder(nn.Module):
    """Stack of SAGEConv layers: the TraPPM GAE encoder.

    Every layer but the last is followed by BatchNorm, ReLU and dropout. The last stays linear:
    the inner-product decoder needs embeddings of both signs, or every pair would score
    sigmoid(>=0) >= 0.5 and non-edges could never be told apart.

    Args:
        in_dim: node feature size (``features.get(name).node_dim``; 113 for ``trappm-v1``).
        dims: output size of each layer; the paper uses (1024, 512, 512, 512).
        dropout: dropout after each hidden layer (paper: 0.5).
    """

    def __init__(self, in_dim: int, dims: Sequence[int] = PAPER_ENCODER_DIMS,
                 dropout: float = 0.5):
        super().__init__()
        if not dims:
            raise ValueError("dims must name at least one layer")
        self.in_dim, self.dims, self.dropout = in_dim, tuple(int(d) for d in dims), dropout
        sizes = (in_dim,) + self.dims
        self.convs = nn.ModuleList(pygnn.SAGEConv(a, b) for a, b in zip(sizes, sizes[1:]))
        self.norms = nn.ModuleList(pygnn.BatchNorm(d) for d in self.dims[:-1])

    @property
    def out_dim(self) -> int:
        return self.dims[-1]

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        """Node embeddings ``[N, dims[-1]]``."""
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.norms):
                x = nn.functional.dropout(self.norms[i](x).relu(), self.dropout, self.training)
        return x


class GAE(pygnn.GAE):
    """Graph auto-encoder with an inner-product decoder (TraPPM phase 1).

    ``forward`` returns the reconstruction loss rather than the embeddings (PyG's ``GAE``
    default), so that a DDP wrapper covers the whole step; :meth:`encode` gives embeddings.

    Args:
        encoder: a :class:`GraphEncoder` (or any module mapping ``(x, edge_index)`` to ``z``).
    """

    def __init__(self, encoder: nn.Module):
        super().__init__(encoder)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        """BCE reconstruction loss of ``edge_index`` against sampled non-edges."""
        return self.recon_loss(self.encode(x, edge_index), edge_index, batch=batch)

    def recon_loss(self, z: Tensor, pos_edge_index: Tensor,
                   neg_edge_index: Tensor | None = None,
                   batch: Tensor | None = None) -> Tensor:
        """Loss on positive edges plus as many sampled negative pairs.

        Negatives are drawn inside each graph of a mini-batch (pairs across graphs would be
        trivially easy) and never from either direction of a real edge: the decoder is
        symmetric, so a reversed forward-only edge is not a non-edge to it.

        Args:
            z: node embeddings.
            pos_edge_index: the graph's edges.
            neg_edge_index: explicit negatives; sampled when None.
            batch: node -> graph assignment of a PyG ``Batch`` (None = one graph).
        """
        if neg_edge_index is None:
            known = to_undirected(pos_edge_index, num_nodes=z.size(0))
            if batch is None:
                neg_edge_index = negative_sampling(known, z.size(0),
                                                   num_neg_samples=pos_edge_index.size(1))
            else:
                neg_edge_index = batched_negative_sampling(known, batch)
        return super().recon_loss(z, pos_edge_index, neg_edge_index)


def pooled_embedding(encoder: nn.Module, x: Tensor, edge_index: Tensor, batch: Tensor,
                     num_graphs: int) -> Tensor:
    """Sum-pooled node embeddings ``[B, out_dim]`` of a frozen encoder (eval mode, no gradients).

    The encoder is frozen during regression, so this is computed once per graph and cached
    rather than in every regressor step.
    """
    was = encoder.training
    encoder.eval()
    with torch.no_grad():
        out = pygnn.global_add_pool(encoder(x, edge_index), batch, num_graphs)
    encoder.train(was)
    return out


def neighbor_mean(x: Tensor, edge_index: Tensor) -> Tensor:
    """Mean of each node's in-neighbours' features (zeros for none): SAGEConv's aggregation.

    The regressor's first layer aggregates fixed input features, so this can be computed once
    per graph instead of in every training step (about half the step time on CPU).
    """
    return scatter(x[edge_index[0]], edge_index[1], 0, dim_size=x.size(0), reduce="mean")


class Regressor(nn.Module):
    """The TraPPM per-target regressor (phase 2).

    Two SAGEConv layers on the node features, sum-pooled; concatenated with the graph's pooled
    embedding from the frozen pretrained encoder (:func:`pooled_embedding`) and the static
    features; then FC -> FC -> output. With ``emb_dim=0`` this is the NNLQP-style supervised
    baseline; fed the embedding of a randomly initialised encoder it is the random-encoder
    ablation.

    Args:
        in_dim: node feature size.
        static_dim: static feature size (6 for ``trappm-v1``, 9 for ``v2``).
        emb_dim: size of the pooled encoder embedding (0 = none).
        hidden: SAGEConv width (paper 512).
        fc: width of the two fully connected layers (paper 512).
        dropout: dropout after each hidden layer (paper 0.05).
        node_dropout: also drop node embeddings after the SAGEConv layers (as published);
            drawing those masks is ~17% of a CPU training step.
        out_dim: number of outputs (one model per target in the paper).
        batch_affine: predict ``fixed + per_sample * batch_size`` instead of one value. Memory
            is close to affine in the batch size for a fixed architecture (a least squares line
            per architecture fits this project's CPU memory labels within 1.6%), so the network
            predicts the value at a reference batch size and the share of it that grows with
            the batch; needs ``log_samples`` in :meth:`forward` and :meth:`set_target_scale`
            before training.
        published_head: as the published code builds it: each SAGEConv output L2-normalised per
            node (PyG's ``normalize=True``, which is what keeps its unscaled node features, MACs
            up to 1e12, from saturating the network) and the output passed through
            ``-logsigmoid`` (positive).
    """

    def __init__(self, in_dim: int, static_dim: int, emb_dim: int = 0, hidden: int = 512,
                 fc: int = 512, dropout: float = 0.05, out_dim: int = 1, node_dropout: bool = True,
                 batch_affine: bool = False, published_head: bool = False):
        super().__init__()
        if batch_affine and out_dim != 1:
            raise ValueError("batch_affine predicts one target (out_dim=1)")
        self.batch_affine, self.published_head = batch_affine, published_head
        self.emb_dim, self.dropout, self.node_dropout = emb_dim, dropout, node_dropout
        self.conv1 = pygnn.SAGEConv(in_dim, hidden)
        self.conv2 = pygnn.SAGEConv(hidden, hidden)
        self.fc1 = nn.Linear(hidden + emb_dim + static_dim, fc)
        self.fc2 = nn.Linear(fc, fc)
        self.out = nn.Linear(fc, 2 if batch_affine else out_dim)
        if batch_affine:
            self.register_buffer("y_std", torch.ones(()))
            self.register_buffer("log_samples_ref", torch.zeros(()))

    @torch.no_grad()
    def set_target_scale(self, y_std: float, mean_log_samples: float) -> None:
        """Give a ``batch_affine`` head the target scaler's log-space std and the reference
        batch size (the training set's geometric mean) its first output is predicted at."""
        self.y_std.fill_(y_std)
        self.log_samples_ref.fill_(mean_log_samples)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor, static: Tensor,
                emb: Tensor | None = None, agg: Tensor | None = None,
                log_samples: Tensor | None = None) -> Tensor:
        """Predictions ``[B, out_dim]`` for the ``B`` graphs of a batch.

        Args:
            x, edge_index, batch: node features, edges and node -> graph index of a PyG Batch.
            static: ``[B, static_dim]`` static features (``Batch.static``).
            emb: ``[B, emb_dim]`` pooled encoder embeddings; required when ``emb_dim > 0``.
            agg: ``neighbor_mean(x, edge_index)`` when cached; computed here when None.
            log_samples: ``[B, 1]`` natural log of each graph's batch size (``batch_affine``).
        """
        node_drop = self._drop if self.node_dropout else (lambda t: t)
        agg = neighbor_mean(x, edge_index) if agg is None else agg
        h = node_drop(self._norm(self.conv1.lin_l(agg) + self.conv1.lin_r(x)).relu())  # = conv1(x, edge_index)
        h = node_drop(self._norm(self.conv2(h, edge_index)).relu())
        pooled = pygnn.global_add_pool(h, batch, static.size(0))
        return self.readout(pooled, static, emb, log_samples)

    def forward_classes(self, c, static: Tensor, emb: Tensor | None = None,
                        log_samples: Tensor | None = None) -> Tensor:
        """:meth:`forward` computed on node classes (a :class:`~trappm_ray.model.node_classes.ClassBatch`):
        the same predictions at a fraction of the cost. Needs ``node_dropout`` off."""
        if self.node_dropout:
            raise ValueError("per-node dropout cannot run on node classes")
        h1 = self._norm(self.conv1.lin_l(c.agg) + self.conv1.lin_r(c.x)).relu()
        mean = scatter(h1[c.src] * c.weight.unsqueeze(1), c.dst, 0, dim_size=c.root.size(0),
                       reduce="sum")
        h2 = self._norm(self.conv2.lin_l(mean) + self.conv2.lin_r(h1[c.root])).relu()
        pooled = scatter(h2 * c.count.unsqueeze(1), c.graph, 0, dim_size=c.num_graphs, reduce="sum")
        return self.readout(pooled, static, emb, log_samples)

    def _drop(self, t: Tensor) -> Tensor:
        return nn.functional.dropout(t, self.dropout, self.training)

    def _norm(self, t: Tensor) -> Tensor:
        return nn.functional.normalize(t, p=2.0, dim=-1) if self.published_head else t

    def readout(self, pooled: Tensor, static: Tensor, emb: Tensor | None,
                log_samples: Tensor | None) -> Tensor:
        """The FC layers on ``[pooled nodes, embedding, static]`` of each graph."""
        num_graphs = static.size(0)
        parts = [pooled]
        if self.emb_dim:
            if emb is None or emb.shape != (num_graphs, self.emb_dim):
                raise ValueError(f"expected emb of shape {(num_graphs, self.emb_dim)}")
            parts.append(emb)
        parts.append(static)
        h = self._drop(self.fc1(torch.cat(parts, 1)).relu())
        h = self._drop(self.fc2(h).relu())
        out = self.out(h)
        if self.published_head:
            return -nn.functional.logsigmoid(out)
        if not self.batch_affine:
            return out
        if log_samples is None:
            raise ValueError("a batch_affine regressor needs log_samples")
        # y(B) = y(ref) * (1 - r + r * B / ref): the first output is y at the reference batch
        # size (in the scaler's z units, as a plain head predicts y), the second the share r of
        # the per-sample part there. Predicting the two log coefficients directly instead
        # trains badly: the max-like combination passes gradient to one branch only.
        share = torch.sigmoid(out[:, 1:])
        ratio = torch.exp(log_samples - self.log_samples_ref)
        return out[:, :1] + torch.log1p(share * (ratio - 1)) / self.y_std
