"""Targets: one definition, the right label column per device kind, and a GPU label table that
trains a predictor which reports training memory and a GPU/MIG fit."""
import json

import pytest

from tests.label_builders import make_labeled_dir
from tests.onnx_builders import cnn_model
from tests.predictor_builders import save_encoder
from trappm_ray import targets
from trappm_ray.labels.examples import load_examples


def test_label_column_per_device_kind():
    assert targets.label_column("train_memory_mb", "cpu") == "mem_above_baseline_mb"
    assert targets.label_column("train_memory_mb", "cuda") == "nvml_used_mb"
    assert targets.label_column("train_memory_mb", "rocm") == "nvml_used_mb"
    assert targets.label_column("train_step_ms", "cuda") == "train_step_ms"
    assert targets.label_column("train_power_w", "cpu") is None  # no power meter on the CPU harness
    assert targets.device_kind(None) == "cpu"


def test_every_target_has_a_unit_and_is_defined_once():
    assert set(targets.REPORTED) <= set(targets.TARGETS)
    assert targets.BATCH_AFFINE == ("train_memory_mb",)
    assert {t.unit for t in targets.TARGETS.values()} <= {"ms", "MB", "W"}
    assert all(t.meaning for t in targets.TARGETS.values())


def test_gpu_rows_feed_training_memory(tmp_path):
    labels = make_labeled_dir(str(tmp_path), slug="test-gpu", device="cuda")
    ex = load_examples(labels, "test-gpu", "v2", ("train_memory_mb", "train_power_w"))
    memory = ex.column("train_memory_mb")
    assert len(memory) == 54 and (memory > 400).all()  # NVML used: allocator pool + context
    assert (ex.column("train_power_w") > 100).all()


def test_gpu_label_table_trains_a_predictor_that_reports_memory_and_fit(tmp_path, ray_session):
    from trappm_ray.serving import api
    from trappm_ray.train.build_predictor import RegressConfig, available_targets, train_predictor

    labels = make_labeled_dir(str(tmp_path / "labels"), slug="test-gpu", device="cuda")
    assert available_targets(labels, "test-gpu") == (
        "train_step_ms", "train_memory_mb", "inference_ms", "train_power_w")
    out = train_predictor(RegressConfig(
        labels=labels, encoder=save_encoder(tmp_path / "enc", 195, "v2"), seeds=(1,),
        targets=("train_step_ms", "train_memory_mb"), max_epochs=2,
        registry=str(tmp_path / "registry"), name="gpu"))
    manifest = json.loads((tmp_path / "registry" / "gpu" / "v0001" / "manifest.json").read_text())
    assert manifest["device"]["kind"] == "cuda" and manifest["targets"] == out["targets"]
    p = api.predict(cnn_model(), 4, predictor=out["uri"])
    assert p.device["kind"] == "cuda"
    assert p.train_memory_mb is not None and p.train_memory_mb.value > 0
    assert p.train_memory_mb.unit == "MB" and p.smallest_profile is not None
    assert p.gpu_profiles and all(v is not None for v in p.gpu_profiles.values())


@pytest.mark.parametrize("target", sorted(targets.TARGETS))
def test_units_reach_predictions(target):
    assert targets.unit(target) == targets.TARGETS[target].unit
