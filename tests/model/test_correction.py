"""The physics answer by kind of kernel, and how far a learned answer may move it."""
from __future__ import annotations

import numpy as np
import pytest

from trappm_ray import devices
from trappm_ray.graph.featurize import featurize
from trappm_ray.model import correction as C
from trappm_ray.model.manifest import Device, Manifest
from trappm_ray.physics import kernel_classes as K
from trappm_ray.physics.step_model import step_time
from trappm_ray.physics.units import TENSOR, VECTOR
from trappm_ray.train.correction_fit import fit_bounds

SAMPLE = "data/sample/onnx/resnet10t@64.onnx"
CONV, POINTWISE, GROUPED = (K.CLASSES.index(c) for c in ("conv", "pointwise", "grouped-conv"))


def test_kernel_classes_split_convolutions_by_groups_and_unit():
    assert K.CLASSES[K.kernel_class("Conv", TENSOR, 1)] == "conv"
    assert K.CLASSES[K.kernel_class("Conv", TENSOR, 4)] == "grouped-conv"
    assert K.CLASSES[K.kernel_class("Conv", VECTOR, 64)] == "depthwise-conv"
    assert K.CLASSES[K.kernel_class("MatMul", TENSOR, 1)] == "matmul"
    assert K.CLASSES[K.kernel_class("Softmax", VECTOR, 1)] == "reduction"
    assert K.CLASSES[K.kernel_class("Resize", VECTOR, 1)] == "pointwise"
    assert K.CLASSES[K.kernel_class("Concat", VECTOR, 1)] == "data-movement"


def test_a_convnets_gpu_time_is_mostly_its_convolutions():
    shares = K.device_shares(featurize(SAMPLE, 32), devices.get("rtx3090"), "amp-fp16")
    assert shares.sum() == pytest.approx(1.0)
    assert shares[CONV] == shares.max() and shares[CONV] > 0.5


def synthetic(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows of conv and pointwise time only: conv steps at 0.8-1.2x physics, pointwise at 2-3x."""
    rng = np.random.default_rng(seed)
    shares = np.zeros((n, len(K.CLASSES)))
    shares[:, CONV] = rng.uniform(0, 1, n)
    shares[:, POINTWISE] = 1 - shares[:, CONV]
    factor = shares[:, CONV] * np.log(rng.uniform(0.8, 1.2, n)) + shares[:, POINTWISE] * np.log(rng.uniform(2, 3, n))
    return shares, np.exp(factor)


def test_bounds_are_per_kind_of_kernel():
    shares, ratio = synthetic()
    bounds = fit_bounds(shares, ratio)
    conv = np.eye(len(K.CLASSES))[CONV]
    lo, hi = bounds.factors(conv)
    assert 0.75 < lo < 0.9 and 1.1 < hi < 1.3  # a graph of dense convolutions: near physics
    lo, hi = bounds.factors(np.eye(len(K.CLASSES))[POINTWISE])
    assert 1.8 < lo < 2.2 and 2.7 < hi < 3.3
    assert 2.2 < bounds.physics(np.eye(len(K.CLASSES))[POINTWISE]) < 2.7
    # a class the rows hardly hold (grouped convolutions) takes the pooled quantiles, not any value
    assert bounds.low[GROUPED] == pytest.approx(np.quantile(np.log(ratio), C.QUANTILES[0]), abs=1e-4)
    assert bounds.high[GROUPED] == pytest.approx(np.quantile(np.log(ratio), C.QUANTILES[1]), abs=1e-4)
    assert all(lo <= mid <= hi for lo, mid, hi in zip(bounds.low, bounds.mid, bounds.high))
    assert C.CorrectionBounds.from_dict(bounds.to_dict()) == bounds


def test_stored_bounds_of_other_classes_are_refused():
    d = fit_bounds(*synthetic()).to_dict()
    with pytest.raises(ValueError, match="classes"):
        C.CorrectionBounds.from_dict({**d, "classes": ["conv", "other"]})


def test_an_answer_is_blended_with_physics_and_one_far_from_it_is_flagged():
    bounds = fit_bounds(*synthetic(), share=0.5)
    conv = np.eye(len(K.CLASSES))[CONV]
    physics = 100 * bounds.physics(conv)
    assert 0.9 < physics / 100 < 1.1  # the conv rows' median factor
    near = {"t": physics * 1.1, "t_low": physics, "t_high": physics * 1.2}
    note = C.hold(near, "t", 100.0, conv, bounds)
    assert near["t"] == pytest.approx(physics * 1.1 ** 0.5) and "out of domain" not in note
    far = {"t": 700.0, "t_std": 7.0, "t_low": 600.0, "t_high": 800.0}
    note = C.hold(far, "t", 100.0, conv, bounds)
    lo, hi = bounds.factors(conv)
    assert far["t"] == pytest.approx(100 * hi)  # the blend (~260 ms) is still beyond the bound
    assert far["t_low"] <= 100 * lo and far["t_high"] >= 100 * hi  # the interval spans the bounds
    assert "out of domain" in note and "no label row made of these kernels stood that far" in note
    none = {"t": 0.01}
    assert "no work" in C.hold(none, "t", 0.0, conv, bounds) and none == {"t": 0.01}  # a graph of no kernels


def test_a_flagged_answer_spans_the_flagged_answers_band_as_well_as_the_bounds():
    bounds = fit_bounds(*synthetic())
    conv = np.eye(len(K.CLASSES))[CONV]
    lo, hi = bounds.factors(conv)
    wide = (np.log(0.2), np.log(5.0))  # flagged answers on families held out stood up to 5x off
    far = {"t": 700.0, "t_low": 600.0, "t_high": 800.0}
    note = C.hold(far, "t", 100.0, conv, bounds, flagged_band=wide)
    assert far["t"] == pytest.approx(100 * hi)
    assert far["t_low"] == pytest.approx(far["t"] * 0.2) and far["t_high"] == pytest.approx(far["t"] * 5.0)
    assert "may be off by up to 5 x" in note
    near = {"t": 105.0, "t_low": 90.0, "t_high": 120.0}  # not flagged: its band stands
    C.hold(near, "t", 100.0, conv, bounds, flagged_band=wide)
    assert near == {"t": 105.0, "t_low": 90.0, "t_high": 120.0}
    narrow = {"t": 700.0, "t_low": 600.0, "t_high": 800.0}  # a flagged band inside the bounds widens nothing more
    C.hold(narrow, "t", 100.0, conv, bounds, flagged_band=(-0.01, 0.01))
    assert narrow["t_low"] <= 100 * lo and narrow["t_high"] == pytest.approx(max(800.0 * 100 * hi / 700.0, 100 * hi))


def test_a_channels_last_training_step_of_grouped_convolutions_is_out_of_domain_by_its_layout():
    grouped = np.eye(len(K.CLASSES))[CONV] * 0.9 + np.eye(len(K.CLASSES))[GROUPED] * 0.1
    assert C.layout_risk("train_step_ms", grouped, "nhwc")
    assert not C.layout_risk("train_step_ms", grouped, "nchw") and not C.layout_risk("inference_ms", grouped, "nhwc")
    assert not C.layout_risk("train_step_ms", np.eye(len(K.CLASSES))[CONV], "nhwc")  # dense convolutions only
    bounds = fit_bounds(*synthetic())
    wide = (np.log(0.5), np.log(3.0))
    near = {"t": 100.0, "t_low": 90.0, "t_high": 110.0}  # the learned answer agrees with physics
    note = C.hold(near, "t", 100.0, grouped, bounds, flagged_band=wide, layout=C.LAYOUT_WHY)
    assert near["t"] == 100.0 and near["t_high"] == pytest.approx(300.0) and near["t_low"] <= 50.0
    assert "out of domain" in note and "channels-last" in note and "rests on physics" not in note


def test_as_shipped_the_learned_answer_stands_within_the_bounds_and_physics_is_named():
    bounds = fit_bounds(*synthetic())
    conv = np.eye(len(K.CLASSES))[CONV]
    row = {"t": 105.0, "t_low": 90.0, "t_high": 120.0}
    note = C.hold(row, "t", 100.0, conv, bounds, batch=64)
    assert bounds.share == 1 and row == {"t": 105.0, "t_low": 90.0, "t_high": 120.0}
    assert note.startswith("t at batch 64: 105 ms, the learned answer; physics (") and "conv 100%" in note


def test_held_bounds_every_step_target_of_a_manifest_and_leaves_one_without_bounds_alone():
    graph, spec = featurize(SAMPLE, 32), devices.get("rtx3090")
    setting = {"precision": "amp-fp16", "optimizer": "sgd-momentum"}
    step = step_time(graph, spec, setting, "train").total_ms
    plain = Manifest(name="p", kind="network", feature_set="v2", targets=("train_step_ms",), device=Device("rtx3090-amp"))
    row = {"train_step_ms": 50 * step}
    assert C.held(row, graph, plain, spec, setting) == [] and row["train_step_ms"] == 50 * step
    bounded = plain.replace(correction={"train_step_ms": fit_bounds(*synthetic()).to_dict()})
    notes = C.held(row, graph, bounded, spec, setting)
    assert len(notes) == 1 and "out of domain" in notes[0] and row["train_step_ms"] < 4 * step
