"""The NumPy forward pass serving runs answers as the PyTorch networks do, and loads no torch."""
import json
import os
import subprocess
import sys

import pytest

from tests.onnx_builders import cnn_model
from tests.predictor_builders import random_predictor
from trappm_ray.graph.arrays import graph_arrays
from trappm_ray.graph.featurize import featurize
from trappm_ray.model.forward import Batch
from trappm_ray.model import predictor as P
from trappm_ray.model.estimator import PredictorError
from trappm_ray.model.network_predictor import NetworkPredictor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def graphs():
    model = cnn_model()
    return [featurize(model, batch_size=b) for b in (1, 4, 64)]


def same_rows(a, b, rel=1e-5):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in y:
            assert x[k] == pytest.approx(y[k], rel=rel, abs=1e-9), k


def test_random_predictor_with_encoder_and_batch_affine_head(tmp_path, graphs):
    torch_pred = random_predictor()
    uri = torch_pred.save(str(tmp_path / "p"))
    numpy_pred = NetworkPredictor.load(uri)
    assert numpy_pred.targets == torch_pred.targets
    rows = numpy_pred.predict_graphs(graphs)
    same_rows(rows, torch_pred.predict_graphs(graphs))
    # the batch-affine memory head grows with the batch, as the PyTorch one does
    assert rows[0]["train_memory_mb"] < rows[2]["train_memory_mb"]


@pytest.mark.parametrize("name", ["rtx3090-amp", "default"])
def test_shipped_predictors(name, graphs):
    path = os.path.join(ROOT, "trappm_ray", "predictors", name)
    torch_pred = P.Predictor.load(path)
    settings = [{"precision": "amp-fp16", "optimizer": "adamw"}] * len(graphs) if name != "default" else None
    same_rows(NetworkPredictor.load(path).predict_graphs(graphs, settings),
              torch_pred.predict_graphs(graphs, settings))


def test_load_refuses_damaged_or_old_format(tmp_path):
    uri = random_predictor().save(str(tmp_path / "p"))
    weights = tmp_path / "p" / "weights.npz"
    weights.write_bytes(weights.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(PredictorError, match="does not match"):
        NetworkPredictor.load(uri)
    uri = random_predictor().save(str(tmp_path / "q"))
    manifest = json.loads((tmp_path / "q" / "manifest.json").read_text())
    (tmp_path / "q" / "manifest.json").write_text(json.dumps({**manifest, "network": {**manifest["network"], "weights_format": 1}}))
    with pytest.raises(PredictorError, match="format 1.*no longer read"):
        NetworkPredictor.load(uri)


def test_a_network_answer_imports_no_torch():
    code = ("import sys, trappm_ray; r = trappm_ray.predict('data/sample/onnx/resnet10t@64.onnx', batch_size=8, "
            "device='rtx3090'); assert r.train_step_ms.value > 0; "
            "print(sorted(m for m in ('torch', 'torch_geometric', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-500:]
    assert out.stdout.strip() == "[]"


def test_batch_reuses_structure_only_for_the_same_graph_arrays(graphs):
    a, other = graph_arrays(graphs[0]), graph_arrays(graphs[2])
    first = Batch([a])
    again = Batch([a.with_static(a.static + 1)])  # the same graph, another static vector
    assert again.adjacency is first.adjacency and (again.static == first.static + 1).all()
    fresh = Batch([other])
    assert fresh.adjacency is not first.adjacency and (fresh.x == other.x).all()
    # the kept columns are every nonzero one: the raw features' products are unchanged
    assert (first.x[:, first.cols] == first.x_cols).all() and not first.x[:, [
        c for c in range(first.x.shape[1]) if c not in set(first.cols)]].any()
