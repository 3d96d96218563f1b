"""Ray jobs of the regression stage on the tiny labeled set: the registered predictor loads and
predicts, and the evaluation writes its report for every split and model asked for."""
import json

import pytest

from tests.label_builders import SLUG, make_labeled_dir
from tests.onnx_builders import cnn_model
from tests.predictor_builders import save_encoder
from trappm_ray.model import predictor as P
from trappm_ray.evaluate.config import EvalConfig
from trappm_ray.evaluate.run import evaluate
from trappm_ray.graph.featurize import featurize
from trappm_ray.train.build_predictor import RegressConfig, available_targets, train_predictor


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("regress")
    labels = make_labeled_dir(str(root / "labels"))
    return root, labels, save_encoder(root / "enc2", 195, "v2"), save_encoder(root / "enc1", 113, "trappm-v1")


def test_train_predictor_registers_a_loadable_predictor(setup, ray_session):
    root, labels, enc2, _ = setup
    assert available_targets(labels, SLUG) == ("train_step_ms", "train_memory_mb", "inference_ms")
    cfg = RegressConfig(labels=labels, encoder=enc2, seeds=(1, 2), max_epochs=2,
                        registry=str(root / "registry"), name="tiny")
    out = train_predictor(cfg)
    assert out["uri"].endswith("tiny/v0001") and out["examples"] == 54
    assert set(out["task_seconds"]) == {f"{t}/{s}" for t in out["targets"] for s in (1, 2)}
    pred = P.Predictor.load(out["uri"])
    m = pred.manifest
    assert m.device.slug == SLUG and m.net.seeds == (1, 2) and m.feature_set == "v2"
    assert m.data["labels"] == 54 and len(m.data["sha256_16"]) == 16 and m.code_version
    row = pred.predict_graphs([featurize(cnn_model(), batch_size=4)])[0]
    assert all(row[t] > 0 for t in out["targets"])


def test_evaluate_writes_every_split_and_model(setup, ray_session, tmp_path):
    root, labels, enc2, enc1 = setup
    cfg = EvalConfig(labels=labels, encoder=enc2, encoder_v1=enc1, seeds=(1337,),
                     models=("trappm-ray", "trappm-published", "mlp", "analytic"),
                     split_models=("mlp", "analytic"), max_epochs=1, out=str(tmp_path))
    report = evaluate(cfg)
    res = report["results"]
    assert set(res) == {"random", "arch", "family"}
    assert set(res["random"]) == {"trappm-ray", "trappm-published", "mlp", "analytic"}
    assert set(res["family"]) == {"mlp", "analytic"}
    assert set(res["random"]["analytic"]) == {"train_memory_mb"}
    fams = res["family"]["mlp"]["train_step_ms"]["families"]
    assert set(fams) == {"cnn", "transformer", "wide"} and all(v["mape"] >= 0 for v in fams.values())
    assert json.loads((tmp_path / "results.json").read_text())["meta"]["examples"] == 54
    md = (tmp_path / "results.md").read_text()
    assert "Leave one family out" in md and "| **mean over families** |" in md
    assert report["meta"]["neighbour_interpolation"]["train_step_ms"]["rows"] == 36
    assert "neighbouring batch sizes" in md
    assert (tmp_path / "results" / "pred_vs_actual_train_step_ms.png").stat().st_size > 1000
