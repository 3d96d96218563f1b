"""Measured anchors: a graph is recognized at any batch, looked up in its setting, and stored."""
import pytest

import onnx_builders as B
from trappm_ray.graph.featurize import featurize
from trappm_ray.graph.rows import graph_to_row
from trappm_ray.model.anchors import MeasuredAnchors, fingerprint, from_examples, nearest_batch
from trappm_ray.model.device_features import SETTING_COLS

SETTING = {"precision": "amp-fp16", "memory_format": "nchw", "optimizer": "sgd-momentum"}


def anchor(graph, batch: int, ratio: float, target: str = "inference_ms", **kw) -> dict:
    return {"fingerprint": fingerprint(graph), "resolution": int(graph.static["resolution"]), "batch_size": batch,
            "target": target, "precision": "amp-fp16", "memory_format": "nchw",
            "optimizer": "sgd-momentum" if target == "train_step_ms" else "none",
            "measured_ms": 1.0, "ratio": ratio, "arch": "tiny", **kw}


def test_the_fingerprint_ignores_the_batch_but_not_the_structure():
    cnn = B.cnn_model()
    assert fingerprint(featurize(cnn, batch_size=2)) == fingerprint(featurize(cnn, batch_size=64))
    assert fingerprint(featurize(cnn, batch_size=2)) != fingerprint(featurize(B.cnn_model(conv_bias=False), batch_size=2))
    assert fingerprint(featurize(cnn, batch_size=2)) != fingerprint(featurize(B.transformer_block(), batch_size=2))


def test_nearest_batch_stays_within_a_factor_two():
    assert nearest_batch([64, 256], 100) == 64
    assert nearest_batch([64, 256], 128) == 64  # a tie: the smaller
    assert nearest_batch([256], 128) == 256 and nearest_batch([256], 127) is None
    assert nearest_batch([], 8) is None


def test_lookup_matches_fingerprint_resolution_target_and_setting(tmp_path):
    g64 = featurize(B.cnn_model(), batch_size=64)
    anchors = MeasuredAnchors([anchor(g64, 64, 3.0), anchor(g64, 256, 2.0),
                               anchor(g64, 64, 4.0, "train_step_ms")], "rtx3090-amp")
    assert anchors.lookup(featurize(B.cnn_model(), batch_size=100), "inference_ms", SETTING)["ratio"] == 3.0
    assert anchors.lookup(featurize(B.cnn_model(), batch_size=200), "inference_ms", SETTING)["ratio"] == 2.0
    assert anchors.lookup(g64, "train_step_ms", SETTING)["ratio"] == 4.0
    assert anchors.lookup(g64, "train_step_ms", {**SETTING, "optimizer": "adam"}) is None
    assert anchors.lookup(g64, "inference_ms", {**SETTING, "precision": "fp32"}) is None
    assert anchors.lookup(featurize(B.cnn_model(), batch_size=8), "inference_ms", SETTING) is None  # 8x off
    assert anchors.lookup(featurize(B.cnn_model(hw=16), batch_size=64), "inference_ms", SETTING) is None
    path = anchors.save(str(tmp_path))
    assert path.endswith("anchors.parquet")
    again = MeasuredAnchors.load(tmp_path)
    assert len(again) == 3 and again.device == "rtx3090-amp"
    assert again.lookup(g64, "inference_ms", SETTING) == anchors.lookup(g64, "inference_ms", SETTING)
    assert MeasuredAnchors.load(tmp_path / "none") is None


def test_from_examples_keeps_the_rows_of_the_predictors_setting_with_their_ratio_to_the_floor():
    g = featurize(B.cnn_model(), batch_size=32)
    res = int(g.static["resolution"])
    index = {("tiny", res, 32): graph_to_row(g, arch="tiny", family="t")}
    setting = dict.fromkeys(SETTING_COLS, 0.0)
    ex = [{"rkey": ("tiny", res, 32, "rtx3090", "amp-fp16", mode, opt, torch2, compiled), "target": target,
           "measured": 6.0, "floor": 2.0, "setting": tuple(setting.values())}
          for mode, opt, target, torch2, compiled in (("infer", "sgd-momentum", "inference_ms", 1, 0),
                                                      ("train", "sgd-momentum", "train_step_ms", 1, 0),
                                                      ("infer", "sgd-momentum", "inference_ms", 1, 1),
                                                      ("train", "sgd-momentum", "train_step_ms", 0, 0))]
    run = {"inference_ms": {"torch2": 1, "compiled": 0}, "train_step_ms": {"torch2": 1, "compiled": 0}}
    anchors = from_examples(ex, index, "rtx3090-amp", run)
    assert len(anchors) == 2  # neither the compiled row nor the PyTorch 1 one is in the predictor's setting
    run["train_step_ms"]["torch2"] = 0  # a predictor of PyTorch 1 steps anchors on those
    assert from_examples(ex, index, "rtx3090-amp", run).lookup(g, "train_step_ms", SETTING) is not None
    assert anchors.lookup(g, "inference_ms", SETTING)["ratio"] == pytest.approx(3.0)
    assert anchors.lookup(g, "train_step_ms", SETTING)["arch"] == "tiny"
