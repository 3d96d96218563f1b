"""Node classes: a repetitive graph shrinks, and the regressor computes the same on the classes."""
import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data

from trappm_ray.model.networks import Regressor, neighbor_mean
from trappm_ray.model.node_classes import ClassBatch, node_classes
from trappm_ray.train.regressors import prepare


def chain_of_blocks(blocks: int, seed: int) -> Data:
    """input -> (conv -> relu) x blocks -> head, plus a skip edge per block; 3 distinct features."""
    g = torch.Generator().manual_seed(seed)
    kinds = torch.randn(3, 5, generator=g)
    n = 2 + 2 * blocks
    x = kinds[[0] + [1, 2] * blocks + [0]].clone()
    x[-1] += 1.0  # the head differs from the input
    src = list(range(n - 1)) + [2 * b for b in range(blocks)]
    dst = list(range(1, n)) + [2 * b + 2 for b in range(blocks)]
    edge_index = torch.tensor([src, dst])
    return Data(x=x, edge_index=edge_index, static=torch.randn(1, 4, generator=g),
                log_samples=torch.log(torch.tensor([[float(seed + 1)]])), num_nodes=n)


def test_repeated_blocks_share_classes():
    d = chain_of_blocks(8, 0)
    c = node_classes(d.x, neighbor_mean(d.x, d.edge_index), d.edge_index)
    assert d.num_nodes == 18
    assert c["u_x"].size(0) < 8 and c["u_root"].size(0) < 10
    assert c["u_count"].sum() == d.num_nodes
    # each class's in-neighbour shares sum to 1 (every node but the input has in-edges)
    shares = torch.zeros(c["u_root"].size(0)).index_add_(0, c["u_dst"], c["u_weight"])
    assert torch.allclose(shares[shares > 0], torch.ones(int((shares > 0).sum())))


def test_regressor_on_classes_matches_nodes_with_gradients():
    graphs = prepare([chain_of_blocks(b, b) for b in (1, 3, 6, 9)])
    plain, classes = Batch.from_data_list(graphs), ClassBatch.collate(graphs)
    emb = torch.randn(4, 3)
    for batch_affine in (False, True):
        torch.manual_seed(0)
        model = Regressor(5, 4, emb_dim=3, hidden=8, fc=8, dropout=0.0, node_dropout=False,
                          batch_affine=batch_affine)
        outs, grads = [], []
        for run in (lambda: model(plain.x, plain.edge_index, plain.batch, plain.static, emb,
                                  plain.agg, plain.log_samples),
                    lambda: model.forward_classes(classes, plain.static, emb, plain.log_samples)):
            model.zero_grad()
            out = run()
            out.square().sum().backward()
            outs.append(out.detach())
            grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        assert torch.allclose(outs[0], outs[1], rtol=1e-5, atol=1e-5)
        assert torch.allclose(grads[0], grads[1], rtol=1e-4, atol=1e-5)


def test_node_dropout_refuses_classes():
    graphs = prepare([chain_of_blocks(2, 1)])
    model = Regressor(5, 4, hidden=8, fc=8, node_dropout=True)
    with pytest.raises(ValueError, match="dropout"):
        model.forward_classes(ClassBatch.collate(graphs), graphs[0].static)


def test_classes_of_a_graph_without_edges():
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    c = node_classes(x, torch.zeros_like(x), torch.zeros((2, 0), dtype=torch.long))
    assert c["u_x"].size(0) == 2 and c["u_src"].numel() == 0
    assert np.allclose(np.sort(c["u_count"].numpy()), [1, 2])
