"""Channels-last answers moved from NCHW ones by a factor per kind of kernel (model/layout.py,
train/layout_fit.py, the layout kinds of physics/kernel_classes.py)."""
import math

import numpy as np
import pytest

from trappm_ray import devices
from trappm_ray.graph.featurize import featurize
from trappm_ray.model.layout import SLOW_SHARE, LayoutFactors
from trappm_ray.model.network_predictor import NetworkPredictor
from trappm_ray.physics import kernel_classes as K
from trappm_ray.train import layout_fit as F

KINDS = len(K.LAYOUT_KINDS)
SAMPLE = "data/sample/onnx/visformer_small@64.onnx"
SHIPPED = "trappm_ray/predictors/rtx3090-amp"


def kind(name: str) -> int:
    return K.LAYOUT_KINDS.index(name)


def factors(**changed: float) -> LayoutFactors:
    f = np.ones(KINDS)
    for name, v in changed.items():
        f[kind(name.replace("_", "-"))] = v
    return LayoutFactors(tuple(f), (math.log(0.8), math.log(1.5)), rows=100, families=10)


def test_convolutions_fall_into_layout_kinds_by_channels_per_group_and_window():
    assert K.LAYOUT_KINDS[K.layout_kind("Conv", 1, 64, 9)] == "dense-conv"
    assert K.LAYOUT_KINDS[K.layout_kind("Conv", 64, 64, 9)] == "depthwise-conv"
    assert K.LAYOUT_KINDS[K.layout_kind("Conv", 64, 64, 81)] == "depthwise-conv-large-window"
    assert K.LAYOUT_KINDS[K.layout_kind("Conv", 32, 128, 9)] == "grouped-conv-narrow"  # ResNeXt 32x4d
    assert K.LAYOUT_KINDS[K.layout_kind("Conv", 32, 512, 9)] == "grouped-conv-mid"
    assert K.LAYOUT_KINDS[K.layout_kind("Conv", 8, 384, 9)] == "grouped-conv-wide"  # Visformer's 48 per group
    assert K.LAYOUT_KINDS[K.layout_kind("InstanceNormalization", 1, 64, 1)] == "group-norm"
    assert K.LAYOUT_KINDS[K.layout_kind("MatMul", 1, 64, 1)] == "other"


def test_a_visformers_time_splits_into_dense_wide_grouped_and_other_kernels():
    shares = K.layout_shares(featurize(SAMPLE, 32), devices.get("rtx3090"), "amp-fp16")
    assert shares.sum() == pytest.approx(1.0)
    assert shares[kind("grouped-conv-wide")] > 0.05 and shares[kind("dense-conv")] > 0.3
    assert shares[kind("grouped-conv-narrow")] == 0 and shares[kind("depthwise-conv")] == 0


def test_the_factor_is_the_shares_weighted_mean_so_no_graph_moves_past_its_kinds():
    lf = factors(dense_conv=0.7, grouped_conv_wide=8.0)
    shares = np.eye(KINDS)[kind("dense-conv")] * 0.9 + np.eye(KINDS)[kind("grouped-conv-wide")] * 0.1
    assert lf.factor(shares) == pytest.approx(0.9 * 0.7 + 0.1 * 8.0)
    for s in np.random.default_rng(0).dirichlet(np.ones(KINDS), 50):
        assert min(lf.factors) <= lf.factor(s) <= max(lf.factors)
    assert LayoutFactors.from_dict(lf.to_dict()) == lf
    with pytest.raises(ValueError, match="kinds"):
        LayoutFactors.from_dict({**lf.to_dict(), "kinds": ["conv", "other"]})


def test_a_move_scales_the_answer_and_widens_its_interval_by_the_band():
    lf = factors(dense_conv=0.5)
    row = {"t": 100.0, "t_std": 10.0, "t_low": 80.0, "t_high": 120.0}
    assert lf.move(row, "t", np.eye(KINDS)[kind("dense-conv")]) == pytest.approx(0.5)
    assert row["t"] == pytest.approx(50.0) and row["t_std"] == pytest.approx(5.0)
    assert row["t_low"] == pytest.approx(40.0 * 0.8) and row["t_high"] == pytest.approx(60.0 * 1.5)


def test_a_move_mostly_in_kinds_far_slower_in_channels_last_is_out_of_domain():
    lf = factors(grouped_conv_wide=8.0)
    slow = np.eye(KINDS)[kind("dense-conv")] * (1 - 2 * SLOW_SHARE) + np.eye(KINDS)[kind("grouped-conv-wide")] * 2 * SLOW_SHARE
    fast = np.eye(KINDS)[kind("dense-conv")] * (1 - SLOW_SHARE / 2) + np.eye(KINDS)[kind("grouped-conv-wide")] * SLOW_SHARE / 2
    assert lf.out_of_domain(slow) and "slower in channels-last" in lf.why(slow)
    assert not lf.out_of_domain(fast) and lf.why(fast) == ""
    assert "the NCHW answer x" in lf.note("t", slow, lf.factor(slow))


def test_the_fit_recovers_known_factors_and_reports_its_error_on_families_held_out():
    rng = np.random.default_rng(1)
    true = np.array([0.7, 0.6, 5.0, 0.5, 2.0, 8.0, 2.5, 1.0])
    x = rng.dirichlet(np.full(KINDS, 0.5), 400)
    y = np.log(x @ true) + rng.normal(0, 0.02, 400)
    fitted = F.fit_factors(x, y)
    well_held = x.sum(0) > 20
    assert np.allclose(fitted[well_held], true[well_held], rtol=0.15)
    err = F.family_out_log_errors(x, y, np.arange(400) % 20)
    assert err.shape == (400,) and np.quantile(np.abs(err), 0.9) < 0.1


def test_pairs_join_each_channels_last_row_to_its_nchw_twin():
    key = ("m", 224, 64, "rtx3090", "amp-fp16", "train", "sgd-momentum", 0.0, 0.0)
    nchw, nhwc = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0), (1.0, 1.0, 0.0, 0.0, 1.0, 0.0)
    ex = [{"rkey": key, "target": "train_step_ms", "setting": nhwc}, {"rkey": key, "target": "inference_ms", "setting": nchw},
          {"rkey": key, "target": "train_step_ms", "setting": nchw}, {"rkey": key[:2] + (32,) + key[3:],
                                                                       "target": "train_step_ms", "setting": nhwc}]
    assert F.pairs(ex) == [(0, 2)]


def test_the_shipped_rtx3090_answers_channels_last_as_its_nchw_answer_moved():
    predictor = NetworkPredictor.load(SHIPPED)
    layout = LayoutFactors.from_dict(predictor.manifest.layout["train_step_ms"])
    graph = featurize(SAMPLE, 128)
    base = {"precision": "amp-fp16", "optimizer": "sgd-momentum"}
    nchw, nhwc = predictor.predict_graphs([graph, graph], [{**base, "memory_format": "nchw"},
                                                           {**base, "memory_format": "nhwc"}])
    f = layout.factor(K.layout_shares(graph, devices.get("rtx3090"), "amp-fp16"))
    assert f > 1.2  # Visformer's wide grouped convolutions: slower in channels-last, as measured
    assert nhwc["train_step_ms"] == pytest.approx(nchw["train_step_ms"] * f)
    assert nhwc["train_step_ms_high"] / nhwc["train_step_ms"] > nchw["train_step_ms_high"] / nchw["train_step_ms"]


def test_the_fit_reads_only_the_pairs_of_the_framework_setting_asked():
    def key(arch, torch2):
        return (arch, 224, 64, "rtx3090", "amp-fp16", "infer", "none", torch2, 0.0)
    nchw, nhwc = (0.0, 0.0, 0.0, 0.0, 1.0, 0.0), (0.0, 1.0, 0.0, 0.0, 1.0, 0.0)
    ex, shares = [], []
    for n in range(12):  # dense convolutions: 3x slower in NHWC under PyTorch 1, unchanged under 2
        for torch2, ratio in ((0.0, 3.0), (1.0, 1.0)):
            for setting, ms in ((nchw, 10.0), (nhwc, 10.0 * ratio)):
                ex.append({"rkey": key(f"m{n}", torch2), "target": "t", "setting": setting, "measured": ms,
                           "family": f"f{n % 4}"})
                shares.append(np.eye(KINDS)[kind("dense-conv")])
    x = np.array(shares)
    old = F.fit_layout(ex, x, runs={"t": (0.0, 0.0)})["t"]
    new = F.fit_layout(ex, x, runs={"t": F.run_key({"torch2": 1, "compiled": 0})})["t"]
    assert old.rows == new.rows == 12
    assert old.factors[kind("dense-conv")] > 2.0 and new.factors[kind("dense-conv")] == pytest.approx(1.0, abs=0.05)
