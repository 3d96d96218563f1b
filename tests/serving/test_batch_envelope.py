"""Batch consistency: ``trappm_ray.serving.batch_envelope`` and its use by the API."""
from __future__ import annotations

import pytest

from trappm_ray.serving import api
from trappm_ray.serving import batch_envelope as E

SAMPLE = "data/sample/onnx/resnet10t@64.onnx"


def test_ladder_climbs_to_the_device_kinds_top():
    assert E.ladder(1, "cuda") == [2, 4, 8, 16, 32, 64, 128]
    assert E.ladder(3, "cuda") == [6, 12, 24, 48, 96, 192]
    assert E.ladder(128, "cuda") == [] and E.ladder(500, "rocm") == []
    assert E.ladder(1, "cpu") == [2, 4] and E.ladder(4, "cpu") == []
    assert E.ladder(1, "unknown") == []


def test_hold_clips_from_the_top_down_and_moves_the_interval_along():
    row = {"train_step_ms": 30.0, "train_step_ms_std": 3.0, "train_step_ms_low": 24.0,
           "train_step_ms_high": 36.0, "train_step_ms_floor": 1.0, "inference_ms": 2.0,
           "inference_ms_std": 0.1}
    above = [{"train_step_ms": 6.0, "inference_ms": 10.0}, {"train_step_ms": 20.0, "inference_ms": 12.0}]
    changed = E.hold(row, above)
    # 2b is lifted to 20 / 2 = 10, so b may cost at most 10; inference at b at least 10 / 2
    assert row["train_step_ms"] == pytest.approx(10.0)
    assert row["train_step_ms_std"] == pytest.approx(1.0) and row["train_step_ms_low"] == pytest.approx(8.0)
    assert row["train_step_ms_high"] == pytest.approx(12.0) and row["train_step_ms_floor"] == 1.0
    assert row["inference_ms"] == pytest.approx(5.0) and row["inference_ms_std"] == pytest.approx(0.25)
    assert changed == {"train_step_ms": (30.0, pytest.approx(10.0)), "inference_ms": (2.0, pytest.approx(5.0))}
    assert len(E.notes(changed, 1, 4)) == 2 and "batches 1..4" in E.notes(changed, 1, 4)[0]


def test_hold_leaves_consistent_rows_and_targets_missing_above():
    row = {"train_step_ms": 8.0, "train_memory_mb": 900.0}
    assert E.hold(row, [{"train_step_ms": 10.0}]) == {} and row == {"train_step_ms": 8.0, "train_memory_mb": 900.0}
    assert E.hold(dict(row), []) == {}


def test_shipped_gpu_answers_never_get_cheaper_with_batch():
    """The raw RTX 3090 predictor falls with batch on this model (benchmarks/batch_consistency.py);
    the API's answers must not."""
    predictor = api.load_predictor(None, "rtx3090", None)
    data, label = api.model_bytes(SAMPLE)
    answers = api.predict_many([(data, api.PredictOptions(b), label) for b in (1, 2, 4, 8, 16, 32, 64, 128)],
                               predictor)
    for t in ("train_step_ms", "inference_ms"):
        series = [getattr(a, t).value for a in answers]
        assert all(a <= c * (1 + 1e-9) and c <= 2 * a * (1 + 1e-9) for a, c in zip(series, series[1:])), (t, series)
    assert any("batch envelope" in n for n in answers[0].notes)
    single = api.predict(SAMPLE, 1, predictor=predictor)
    assert single.train_step_ms.value == pytest.approx(answers[0].train_step_ms.value)
