"""The TraPPM networks on small synthetic graphs: shapes, gradients, learning, the baseline."""
import pytest
import torch
from torch_geometric.data import Batch, Data

from trappm_ray.model.networks import GAE, GraphEncoder, Regressor, neighbor_mean, pooled_embedding

IN_DIM, STATIC_DIM = 12, 5


def _chain(n: int, seed: int) -> Data:
    """A chain with skip connections (like a residual net), edges both ways."""
    g = torch.Generator().manual_seed(seed)
    src = list(range(n - 1)) + list(range(0, n - 2, 2))
    dst = list(range(1, n)) + list(range(2, n, 2))
    ei = torch.tensor([src + dst, dst + src])
    return Data(x=torch.randn(n, IN_DIM, generator=g), edge_index=ei,
                static=torch.randn(1, STATIC_DIM, generator=g), y=torch.randn(1, 1, generator=g))


@pytest.fixture
def batch():
    return Batch.from_data_list([_chain(n, i) for i, n in enumerate((7, 12, 20))])


def test_encoder_shapes_and_paper_default():
    enc = GraphEncoder(113)
    assert [c.out_channels for c in enc.convs] == [1024, 512, 512, 512]
    assert enc.convs[0].in_channels == 113 and enc.out_dim == 512 and len(enc.norms) == 3
    small = GraphEncoder(IN_DIM, (16, 8), dropout=0.0)
    g = _chain(9, 0)
    assert small(g.x, g.edge_index).shape == (9, 8)
    with pytest.raises(ValueError):
        GraphEncoder(IN_DIM, ())


def test_gae_gradients_reach_every_layer(batch):
    model = GAE(GraphEncoder(IN_DIM, (16, 8), dropout=0.5))
    loss = model(batch.x, batch.edge_index, batch.batch)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_negatives_stay_inside_graphs_and_off_edges(batch, monkeypatch):
    import torch_geometric.nn as pygnn

    captured = {}
    orig = pygnn.GAE.recon_loss

    def spy(self, z, pos, neg=None):
        captured["neg"] = neg
        return orig(self, z, pos, neg)

    monkeypatch.setattr(pygnn.GAE, "recon_loss", spy)
    GAE(GraphEncoder(IN_DIM, (8,)))(batch.x, batch.edge_index, batch.batch)
    neg = captured["neg"]
    assert neg.size(1) > 0
    assert (batch.batch[neg[0]] == batch.batch[neg[1]]).all()  # no cross-graph pairs
    edges = set(map(tuple, batch.edge_index.t().tolist()))
    assert not any((a, b) in edges for a, b in neg.t().tolist())


def test_gae_loss_decreases(batch):
    torch.manual_seed(0)
    model = GAE(GraphEncoder(IN_DIM, (32, 16), dropout=0.0))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(40):
        loss = model(batch.x, batch.edge_index, batch.batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.8 * first, (first, last)


def test_pooled_embedding_is_frozen_and_sums_nodes(batch):
    enc = GraphEncoder(IN_DIM, (16, 8))
    enc.train()
    before = {k: v.clone() for k, v in enc.state_dict().items()}
    emb = pooled_embedding(enc, batch.x, batch.edge_index, batch.batch, batch.num_graphs)
    assert emb.shape == (3, 8) and not emb.requires_grad
    assert enc.training  # mode restored
    for k, v in enc.state_dict().items():  # eval mode: BatchNorm statistics did not move
        assert torch.equal(v, before[k]), k
    enc.eval()
    first = enc(batch.x[:7], batch.edge_index[:, batch.batch[batch.edge_index[0]] == 0])
    assert torch.allclose(emb[0], first.sum(0), atol=1e-5)


def test_regressor_with_embedding(batch):
    reg = Regressor(IN_DIM, STATIC_DIM, emb_dim=8, hidden=16, fc=16)
    emb = torch.randn(3, 8)
    out = reg(batch.x, batch.edge_index, batch.batch, batch.static, emb)
    assert out.shape == (3, 1) and reg.fc1.in_features == 16 + 8 + STATIC_DIM
    torch.nn.functional.mse_loss(out, batch.y).backward()
    assert reg.conv1.lin_l.weight.grad is not None and reg.fc1.weight.grad is not None
    with pytest.raises(ValueError):
        reg(batch.x, batch.edge_index, batch.batch, batch.static)  # embedding missing


def test_cached_aggregation_equals_sageconv(batch):
    reg = Regressor(IN_DIM, STATIC_DIM, hidden=16, fc=16, dropout=0.0).eval()
    agg = neighbor_mean(batch.x, batch.edge_index)
    direct = reg.conv1(batch.x, batch.edge_index)
    assert torch.allclose(reg.conv1.lin_l(agg) + reg.conv1.lin_r(batch.x), direct, atol=1e-5)
    a = reg(batch.x, batch.edge_index, batch.batch, batch.static)
    b = reg(batch.x, batch.edge_index, batch.batch, batch.static, agg=agg)
    assert torch.allclose(a, b)


def test_regressor_without_embedding(batch):
    reg = Regressor(IN_DIM, STATIC_DIM, hidden=16, fc=16, out_dim=2)
    assert reg.fc1.in_features == 16 + STATIC_DIM
    out = reg(batch.x, batch.edge_index, batch.batch, batch.static)
    assert out.shape == (3, 2)
    out.sum().backward()


def test_regressor_paper_sizes():
    reg = Regressor(113, 6, emb_dim=512)
    assert reg.fc1.in_features == 512 + 512 + 6 and reg.fc2.out_features == 512
    assert reg.out.out_features == 1 and reg.dropout == 0.05


def test_batch_affine_regressor_is_affine_in_batch_size(batch):
    reg = Regressor(IN_DIM, STATIC_DIM, hidden=16, fc=16, dropout=0.0, batch_affine=True).eval()
    reg.set_target_scale(0.7, 1.5)
    with pytest.raises(ValueError):
        reg(batch.x, batch.edge_index, batch.batch, batch.static)  # log_samples missing
    with torch.no_grad():
        y = [torch.exp(0.7 * reg(batch.x, batch.edge_index, batch.batch, batch.static,
                                 log_samples=torch.full((3, 1), float(b)).log()))
             for b in (1, 2, 3, 8)]
    step = y[1] - y[0]
    assert (step > 0).all()
    assert torch.allclose(y[2] - y[1], step, rtol=1e-4)  # the same per-sample part every step
    assert torch.allclose(y[3] - y[0], 7 * step, rtol=1e-4)
    assert "y_std" in reg.state_dict()  # the scale travels with the saved weights
    with pytest.raises(ValueError):
        Regressor(IN_DIM, STATIC_DIM, out_dim=2, batch_affine=True)


def test_published_head_normalises_nodes_and_stays_positive_on_raw_counts(batch):
    """The published network L2-normalises each SAGEConv output, so node features at the scale
    of raw MACs (1e11) leave it finite; its output is -logsigmoid, never negative."""
    raw = batch.x * 1e11
    plain = Regressor(IN_DIM, STATIC_DIM, hidden=16, fc=16, dropout=0.0).eval()
    published = Regressor(IN_DIM, STATIC_DIM, hidden=16, fc=16, dropout=0.0, published_head=True).eval()
    published.load_state_dict(plain.state_dict())
    small = published(batch.x, batch.edge_index, batch.batch, batch.static)
    big = published(raw, batch.edge_index, batch.batch, batch.static)
    assert (small >= 0).all() and (big >= 0).all() and big.abs().max() < 1e3
    assert plain(raw, batch.edge_index, batch.batch, batch.static).abs().max() > 1e6
