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
from torch_geometric.utils import batched_negative_sampling, negative_sampling, to_undirected

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


class Regressor(nn.Module):
    """The TraPPM per-target regressor (phase 2).

    Two SAGEConv layers on the node features, sum-pooled; concatenated with the sum-pooled
    embedding of a frozen pretrained encoder and the static features; then FC -> FC -> output.
    Without the embedding this is the NNLQP-style supervised baseline; with a randomly
    initialised encoder it is the random-encoder ablation.

    Args:
        in_dim: node feature size.
        static_dim: static feature size (6 for ``trappm-v1``, 9 for ``v2``).
        encoder: the pretrained encoder; frozen here (no gradients, always in eval mode).
        use_embedding: concatenate the encoder embedding (False = baseline; ``encoder`` unused).
        hidden: SAGEConv width (paper 512).
        fc: width of the two fully connected layers (paper 512).
        dropout: dropout after each hidden layer (paper 0.05).
        out_dim: number of targets (one model per target in the paper).
    """

    def __init__(self, in_dim: int, static_dim: int, encoder: GraphEncoder | None = None,
                 use_embedding: bool = True, hidden: int = 512, fc: int = 512,
                 dropout: float = 0.05, out_dim: int = 1):
        super().__init__()
        if use_embedding and encoder is None:
            raise ValueError("use_embedding=True needs an encoder (pretrained or random)")
        self.use_embedding, self.dropout = use_embedding, dropout
        self.encoder = encoder if use_embedding else None
        if self.encoder is not None:
            self.encoder.requires_grad_(False)
            self.encoder.eval()
        self.conv1 = pygnn.SAGEConv(in_dim, hidden)
        self.conv2 = pygnn.SAGEConv(hidden, hidden)
        emb = self.encoder.out_dim if self.encoder is not None else 0
        self.fc1 = nn.Linear(hidden + emb + static_dim, fc)
        self.fc2 = nn.Linear(fc, fc)
        self.out = nn.Linear(fc, out_dim)

    def train(self, mode: bool = True) -> Regressor:
        super().train(mode)
        if self.encoder is not None:  # frozen means fixed BatchNorm statistics and no dropout
            self.encoder.eval()
        return self

    def embed(self, x: Tensor, edge_index: Tensor, batch: Tensor, num_graphs: int) -> Tensor:
        """Sum-pooled frozen-encoder embedding ``[B, encoder.out_dim]``."""
        with torch.no_grad():
            return pygnn.global_add_pool(self.encoder(x, edge_index), batch, num_graphs)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor, static: Tensor) -> Tensor:
        """Predictions ``[B, out_dim]`` for the ``B`` graphs of a batch.

        Args:
            x, edge_index, batch: node features, edges and node -> graph index of a PyG Batch.
            static: ``[B, static_dim]`` static features (``Batch.static``).
        """
        drop = lambda t: nn.functional.dropout(t, self.dropout, self.training)  # noqa: E731
        num_graphs = static.size(0)
        h = drop(self.conv1(x, edge_index).relu())
        h = drop(self.conv2(h, edge_index).relu())
        parts = [pygnn.global_add_pool(h, batch, num_graphs)]
        if self.encoder is not None:
            parts.append(self.embed(x, edge_index, batch, num_graphs))
        parts.append(static)
        h = drop(self.fc1(torch.cat(parts, 1)).relu())
        h = drop(self.fc2(h).relu())
        return self.out(h)
