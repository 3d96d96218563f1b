"""The spec-based predictor bound to a device: features, floors, intervals, refusals."""
import json

import numpy as np
import pytest

import onnx_builders as B
from spec_builders import train_tiny
from trappm_ray import devices, errors
from trappm_ray.graph.featurize import featurize
from trappm_ray.model.device_features import feature_names
from trappm_ray.model.predictor import PredictorError
from trappm_ray.model.intervals import quantile_offsets
from trappm_ray.model.manifest import SPEC, Boosters, Device, Manifest
from trappm_ray.model.spec_model import VARIANTS, SpecModel, SpecPredictor, derived, design, design_names
from trappm_ray.physics.roofline import roofline


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("spec") / "gpu-spec"
    train_tiny(str(out))
    return str(out)


def test_design_variants_have_their_columns():
    x = np.random.default_rng(0).normal(size=(3, len(feature_names())))
    for v in VARIANTS:
        assert design(x, v).shape == (3, len(design_names(v)))
    assert derived(x).shape == (3, 8)


def test_predicts_a_table_device_and_respects_the_floor(tiny):
    model = SpecModel.load(tiny)
    pred = SpecPredictor(model, devices.get("h100-sxm5-80gb"))
    assert pred.manifest.device.spec_only and "device specs alone" in pred.manifest.device.note
    graph = featurize(B.cnn_model(), batch_size=4)
    row = pred.predict_graphs([graph])[0]
    spec = devices.get("h100-sxm5-80gb")
    assert row["train_step_ms"] >= roofline(graph, spec, "amp-fp16", "train", "sgd-momentum").total_ms
    assert row["inference_ms"] >= roofline(graph, spec, "amp-fp16", "infer", "none").total_ms
    for t in ("train_step_ms", "inference_ms"):
        assert row[f"{t}_floor"] <= row[f"{t}_low"] <= row[t] <= row[f"{t}_high"]
    fp32 = pred.predict_graphs([graph], [{"precision": "fp32", "optimizer": "sgd-momentum"}])[0]
    assert fp32["train_step_ms_floor"] > row["train_step_ms_floor"]  # no FP16 tensor cores at fp32


def test_json_spec_and_refusals(tiny, tmp_path):
    f = tmp_path / "gpu.json"
    f.write_text(json.dumps({"name": "My GPU", "memory_gb": 48, "memory_bw_gbs": 900,
                             "peak_fp32_tflops": 40, "peak_fp16_tensor_tflops": 160}))
    pred = SpecPredictor(SpecModel.load(tiny), devices.from_json(f), user_spec=True)
    assert pred.manifest.name.startswith("gpu-spec:my-gpu#")
    assert pred.predict_graphs([featurize(B.cnn_model(), batch_size=2)])[0]["inference_ms"] > 0
    with pytest.raises(errors.UnsupportedOption, match="fp64"):
        pred.check({"precision": "fp64"})  # no FP64 peak in the file: no roofline
    (tmp_path / "bad" ).mkdir()
    with pytest.raises(PredictorError):
        SpecModel.load(tmp_path / "bad")


def test_damaged_booster_is_refused(tiny, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tiny, copy)
    booster = next(copy.glob("booster-*.json"))
    booster.write_text(booster.read_text().replace("1", "2", 1))
    with pytest.raises(PredictorError, match="does not match"):
        SpecModel.load(copy)


def test_intervals_follow_z(tiny):
    m = SpecModel.load(tiny).manifest
    lo1, hi1 = quantile_offsets(m.residual_quantiles, "inference_ms", 1.0)
    lo2, hi2 = quantile_offsets(m.residual_quantiles, "inference_ms", 1.96)
    assert lo2 <= lo1 <= hi1 <= hi2


class _FixedRatio(SpecModel):
    """A spec model whose boosters always answer log ratio 0.5 (unit test of ``time_ms``)."""

    def log_ratio(self, x):
        return np.full(len(x), 0.5)


def test_time_is_the_base_times_the_blended_ratio_and_older_models_keep_the_floor():
    from trappm_ray.model.device_features import KERNELS_COL
    x = np.zeros((2, len(feature_names())))
    x[:, KERNELS_COL] = np.log([10, 1000])  # 0.3 ms and 30 ms of host time at 30 us a kernel
    floors = np.array([1.0, 1.0])
    def spec_manifest(**boosters) -> Manifest:
        return Manifest(name="gpu-spec", kind=SPEC, feature_set="v2", targets=("inference_ms",), device=Device("gpu-spec"),
                        boosters=Boosters(variant="physics", features=(), files=(), **boosters))

    model = _FixedRatio(spec_manifest(host_us_per_kernel={"inference_ms": 30.0}, efficiency={"inference_ms": 0.1}), [])
    assert np.allclose(model.time_ms(x, floors, "inference_ms"), np.array([1.0, 30.0]) * np.exp(0.3))
    older = _FixedRatio(spec_manifest(), [])  # stored before the base: floor x ratio
    assert np.allclose(older.time_ms(x, floors, "inference_ms"), np.exp(0.5))
    low = _FixedRatio(spec_manifest(host_us_per_kernel={"inference_ms": 30.0}, efficiency={"inference_ms": -3.0}), [])
    assert np.all(low.time_ms(x, floors, "inference_ms")[0] >= 1.0)  # never below the floor
