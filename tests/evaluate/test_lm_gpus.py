"""Transformer LMs on GPUs left out: the per-GPU errors and batch ratios, and the report section."""
from __future__ import annotations

import pytest

from trappm_ray.evaluate import lm_gpus as L
from trappm_ray.evaluate.step_model_report import markdown


def _p(device: str, batch: int, measured: float, step: float, target: str = "inference_ms") -> L.LmPoint:
    return L.LmPoint(device, "gpt2_large", 1024, batch, target, measured, step)


POINTS = [_p("t4", 4, 100.0, 80.0), _p("t4", 4, 110.0, 80.0), _p("t4", 8, 200.0, 176.0),
          _p("mi100", 2, 50.0, 60.0), _p("mi100", 1, 40.0, 30.0, "train_step_ms")]
LODO = {"inference_ms": {"devices": {"t4": {"mape": 16.5, "rows": 5}}}}


def test_batch_ratios_average_repeated_measurements_and_skip_single_batches():
    (s,) = L.sweeps(POINTS)
    assert (s["device"], s["batches"]) == ("t4", [4, 8])
    # measured 105 -> 200 (repeats averaged), answered 80 -> 176: (80 / 176) / (105 / 200) - 1
    assert s["ratio_error"] == pytest.approx([(80 / 176) / (105 / 200) - 1])


def test_summary_per_gpu_beside_the_spec_predictors_lodo_and_the_published_figure():
    out = L.summary(POINTS, L.sweeps(POINTS), LODO)
    inf = out["inference_ms"]
    assert inf["devices"]["t4"]["step"]["n"] == 3
    assert inf["devices"]["t4"]["step"]["worst"] == pytest.approx(100 * abs(80 / 110 - 1))
    assert inf["devices"]["t4"]["spec_lodo"] == 16.5 and inf["devices"]["mi100"]["spec_lodo"] is None
    assert inf["devices"]["mi100"]["ratio"] is None
    assert inf["mean"]["step"] == pytest.approx((inf["devices"]["t4"]["step"]["mape"] + 20.0) / 2)
    assert inf["published"] == L.PUBLISHED["inference_ms"]
    assert out["train_step_ms"]["mean"]["spec_lodo"] is None  # no GPU with a LODO figure: none reported
    lm = {"summary": out, "sweeps": [], "points": []}
    text = markdown({"summary": {}, "sweeps": []}, {"summary": {}}, "cmd", 1.0, lm)
    assert "## Transformer LMs on GPUs left out" in text and "| t4 | 3 |" in text and "16.5%" in text
