"""Regression suite over real foreign files: models this project never exported, predicted on
every shipped predictor, must give an answer that is physically possible or a typed one-line error.

Physically possible: training memory (and its interval's low end) at least the weights +
gradients + optimizer state of the graph's parameters for the prediction's precision and
optimizer, counted here from the graph's parameter count, not from the predictor's own floor; step
time and inference latency (and their intervals' low ends) at least the device's roofline time
where the device has a spec; every number finite and positive.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from trappm_ray import errors
from trappm_ray.serving.api import load_predictor, predict
from tests import onnx_builders as B

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
LIGHT = sorted((DATA / "light").glob("light_*.onnx"))
CONVERTED = sorted((DATA / "pytorch-converted").glob("*/model.onnx"))[:12]
SHIPPED = ["default", "rtx3090"]  # the CPU predictor and the RTX 3090 one
MiB = 2.0 ** 20
# Bytes per parameter that must be resident while training: the weights, one gradient each, and
# the optimizer's state; AMP keeps fp32 master weights and fp32 gradients.
STATE_BYTES = {("fp32", "adam"): 16, ("fp32", "adamw"): 16, ("fp32", "sgd-momentum"): 12,
               ("fp32", "sgd"): 8, ("amp-fp16", "sgd-momentum"): 12, ("amp-fp16", "adam"): 16}


@pytest.fixture(scope="module", params=SHIPPED)
def predictor(request):
    return load_predictor(None, None if request.param == "default" else request.param)


def assert_physical(p) -> None:
    """The checks of this module's docstring on one :class:`~trappm_ray.serving.api.Prediction`."""
    opts = p.options
    key = (opts.get("precision", "fp32"), opts.get("optimizer", "adam"))
    floor_mb = p.graph["params"] * STATE_BYTES[key] / MiB
    for name in ("train_step_ms", "train_memory_mb", "inference_ms"):
        e = getattr(p, name)
        if e is None:
            continue
        assert all(math.isfinite(v) and v > 0 for v in (e.value, e.low, e.high)), (name, e)
        assert e.low <= e.value <= e.high, (name, e)
        floor = floor_mb if name == "train_memory_mb" else p.floors.get(name, 0.0)
        assert e.value >= floor * (1 - 1e-6) and e.low >= floor * (1 - 1e-6), (name, e, floor)


def predicted_or_typed(path, predictor, **kw):
    try:
        p = predict(str(path), predictor=predictor, **kw)
    except errors.ModelError as e:
        assert "\n" not in str(e) and str(e).startswith(e.code)
        return None
    assert_physical(p)
    return p


@pytest.mark.skipif(not LIGHT, reason="this onnx build ships no test data")
@pytest.mark.parametrize("batch", [1, 32])
def test_classic_zoo_models_predict_physically(predictor, batch):
    for path in LIGHT:
        p = predicted_or_typed(path, predictor, batch_size=batch)
        assert p is not None, path.name  # every light model is predicted, at batch 1 and 32
        assert p.batch_size == batch and p.graph["batch_rebound"] == (batch != 1)


@pytest.mark.skipif(not CONVERTED, reason="this onnx build ships no test data")
def test_converted_models_predict_or_give_a_typed_error(predictor):
    answered = [predicted_or_typed(path, predictor, batch_size=None) for path in CONVERTED]
    assert sum(p is not None for p in answered) >= len(CONVERTED) // 2


@pytest.mark.parametrize("kind", B.BOMB_KINDS)
def test_shape_bombs_are_refused(predictor, kind, tmp_path):
    path = tmp_path / f"{kind}.onnx"
    path.write_bytes(B.to_bytes(B.bomb_model(kind)))  # asks for ~9e8 elements, only its shape used
    with pytest.raises(errors.NoDataPath):
        predict(str(path), predictor=predictor, batch_size=8)


@pytest.mark.parametrize("kind", B.BOMB_KINDS)
def test_models_computing_on_huge_tensors_predict_physically(predictor, kind, tmp_path):
    """The bombs' tensors in a model that reads them: a real (if odd) model, predicted flagged
    and never below the memory the big tensor itself occupies."""
    path = tmp_path / f"{kind}.onnx"
    path.write_bytes(B.to_bytes(B.bomb_model(kind, reads_values=True)))
    p = predicted_or_typed(path, predictor, batch_size=8)
    if p is not None:  # "range" asks for int64: 8 bytes an element
        assert p.warnings, p
        biggest = 8 * 9e8 * (4 if kind != "range" else 8) / 2  # at half width under AMP
        assert p.train_memory_mb.value >= biggest / 2**20, p.train_memory_mb


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hf_bert_base", "hf_gpt2", "hf_t5_small_encoder", "hf_llama_decoder"])
def test_text_transformer_exports_predict_physically(name, tmp_path):
    from trappm_ray.corpus import text_models

    path = tmp_path / f"{name}.onnx"
    path.write_bytes(text_models.export_text_model(name)[0])
    for device in SHIPPED:
        chosen = load_predictor(None, None if device == "default" else device)
        for batch in (1, 8):
            p = predicted_or_typed(path, chosen, batch_size=batch, dims={"seq": 128})
            assert p is not None and p.graph["params"] > 30e6
    # the CLI, as a user runs it: BERT-base's training memory is at least its fp32 + Adam floor
    if name == "hf_bert_base":
        out = subprocess.run([sys.executable, "-m", "trappm_ray.cli", "predict", str(path), "--dim",
                              "seq=128", "--json"], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout)
        floor_mb = r["graph"]["params"] * STATE_BYTES[("fp32", "adam")] / MiB
        assert r["graph"]["params"] > 100e6 and r["train_memory_mb"] >= floor_mb
        assert r["interval"]["train_memory_mb"][0] >= floor_mb * (1 - 1e-6)
