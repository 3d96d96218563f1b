"""Every predictor that answers for a device plays one interface (model/estimator.py), so the batch
job works for every device `trappm-ray devices` lists."""
import os

import pyarrow.parquet as pq

from trappm_ray import storage
from trappm_ray.model.estimator import Estimator
from trappm_ray.model.compositions import SettingMove, TargetFill
from trappm_ray.serving import routing as R
from trappm_ray.serving.batch import BatchPredictConfig, run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLES = os.path.join(ROOT, "data", "sample", "onnx")


def test_every_listed_device_routes_to_an_estimator():
    kinds = set()
    for entry in R.device_catalog():
        est = R.load_predictor(None, entry["device"])
        assert isinstance(est, Estimator), entry["device"]
        assert set(est.targets) and est.manifest.name
        kinds.add(type(est).__name__)
    assert {"NetworkPredictor", "SpecPredictor", "TargetFill"} <= kinds  # the RTX 4090 is completed by specs


def test_the_compositions_are_estimators_too():
    rtx3090 = R.load_predictor(None, "rtx3090")
    moved, setting = R.settled({"precision": "fp32"}, rtx3090)
    assert isinstance(moved, SettingMove) and isinstance(moved, Estimator)
    assert setting["precision"] == "fp32" and moved.base(setting)["precision"] == "amp-fp16"
    assert isinstance(R.load_predictor(None, "rtx4090"), TargetFill)


def test_batch_job_writes_every_row_on_a_completed_predictor(ray_session, tmp_path):
    """The RTX 4090's predictor is completed by the spec-based one (TargetFill): every file of
    the samples gets a row with its training step time."""
    cfg = BatchPredictConfig(src=SAMPLES, dst=str(tmp_path / "out"), device="rtx4090", batch_size=8, actors=1)
    summary = run(cfg)
    files = [f for f in os.listdir(SAMPLES) if f.endswith(".onnx")]
    assert summary.ok == len(files) and summary.errors == 0
    rows = [r for f in storage.listdir(cfg.dst, ".parquet") for r in pq.read_table(f).to_pylist()]
    assert len(rows) == len(files)
    assert all(r["train_step_ms"] and r["train_step_ms"] > 0 for r in rows)


