"""Predictor: predictions per graph, save/load round trip, registry versions, refusals."""
import json

import pytest
import torch
from torch_geometric.data import Batch

from tests.onnx_builders import cnn_model
from tests.predictor_builders import random_predictor
from trappm_ray.model import predictor as P, stored
from trappm_ray.graph.data import graph_data
from trappm_ray.graph.featurize import featurize


@pytest.fixture(scope="module")
def graphs():
    model = cnn_model()
    return [featurize(model, batch_size=b) for b in (1, 4)]


def test_predict_graphs_gives_every_target_and_spread(graphs):
    pred = random_predictor()
    rows = pred.predict_graphs(graphs)
    assert len(rows) == 2
    for row in rows:
        assert set(row) == {t + s for t in pred.targets for s in ("", "_std")}
        assert all(row[t] > 0 for t in pred.targets)


def test_graph_data_batches_keep_each_graphs_batch_size(graphs):
    # PyG offsets attributes named like "batch" when batching; log_samples must stay as is
    batch = Batch.from_data_list([graph_data(g, "v2") for g in graphs * 2])
    assert torch.allclose(batch.log_samples.exp().squeeze(1), torch.tensor([1.0, 4.0, 1.0, 4.0]))


def test_save_load_round_trip(tmp_path, graphs):
    pred = random_predictor()
    uri = P.register(pred, str(tmp_path), "cpu")
    assert uri.endswith("v0001")
    again = P.Predictor.load(uri)
    assert again.manifest.version == "v0001" and again.targets == pred.targets
    assert again.manifest == pred.manifest  # the typed manifest survives its JSON round trip
    assert again.heads["train_memory_mb"][0].batch_affine
    assert not again.heads["train_step_ms"][0].batch_affine
    assert not again.heads["train_step_ms"][0].node_dropout  # as trained: fine-tuning keeps it
    for a, b in zip(again.predict_graphs(graphs), pred.predict_graphs(graphs)):
        assert a == pytest.approx(b)
    assert P.register(random_predictor(seed=1), str(tmp_path), "cpu").endswith("v0002")
    assert stored.latest(str(tmp_path), "cpu").endswith("v0002")


def test_load_refuses_damaged_or_incompatible(tmp_path):
    uri = random_predictor().save(str(tmp_path / "p"))
    weights = tmp_path / "p" / "weights.npz"
    weights.write_bytes(weights.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(P.PredictorError, match="does not match"):
        P.Predictor.load(uri)
    uri = random_predictor().save(str(tmp_path / "q"))
    manifest = json.loads((tmp_path / "q" / "manifest.json").read_text())
    (tmp_path / "q" / "manifest.json").write_text(json.dumps({**manifest, "network": {**manifest["network"], "weights_format": 99}}))
    with pytest.raises(P.PredictorError, match="weights format 99"):
        P.Predictor.load(uri)
    for bad, why in (({**manifest, "schema": 0}, "schema 0; this version reads schema 1"),
                     ({**manifest, "code": "abc"}, "unknown field.*code"),
                     ({**manifest, "device": {"slug": "x", "threads": 1, "cores": 2}}, "device: unknown field.*cores"),
                     ({k: v for k, v in manifest.items() if k != "targets"}, "missing or malformed field")):
        (tmp_path / "q" / "manifest.json").write_text(json.dumps(bad))
        with pytest.raises(P.PredictorError, match=why):
            P.Predictor.load(uri)
    with pytest.raises(P.PredictorError, match="no readable predictor"):
        P.Predictor.load(str(tmp_path / "missing"))


def test_scaler_round_trip():
    y = torch.tensor([[10.0], [100.0], [1000.0]])
    sc = P.Scaler.fit(torch.randn(3, 4), torch.randn(3, 2) * 1e4, y)
    assert torch.allclose(sc.y_inverse(sc.y(y)), y, rtol=1e-5)
    assert abs(float(sc.y(y).mean())) < 1e-6


def test_load_refuses_weights_that_do_not_fit(tmp_path):
    uri = random_predictor().save(str(tmp_path / "p"))
    path = tmp_path / "p" / "manifest.json"
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps({**manifest, "network": {**manifest["network"], "seeds": [7, 8]}}))  # tensors: seeds 1, 2
    with pytest.raises(P.PredictorError, match="do not fit"):
        P.Predictor.load(uri)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device"))])
def test_predictor_predicts_the_same_on_another_device(graphs, device):
    expected = random_predictor().predict_graphs(graphs)
    moved = random_predictor().to(device)
    assert moved.compute.type == device
    assert all(p.device.type == device for h in moved.heads["train_step_ms"] for p in h.parameters())
    for a, b in zip(moved.predict_graphs(graphs), expected):
        assert a == pytest.approx(b, rel=1e-4)
