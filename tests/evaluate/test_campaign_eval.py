"""The campaign evaluation's arithmetic on rows whose 'measurements' are known multiples of the
answers (so every figure it reports is known beforehand)."""
import numpy as np
import pyarrow as pa
import pytest

import onnx_builders as B
from trappm_ray import devices, storage
from trappm_ray.evaluate.campaign import (as_measured, autotuned, campaign_rows, evaluate, memory_errors,
                                         physics_precision, row_setting)
from trappm_ray.evaluate.campaign_report import report
from trappm_ray.graph.featurize import featurize
from trappm_ray.graph.rows import GRAPHS_FILE, graph_to_row
from trappm_ray.labels import store
from trappm_ray.labels.examples import GRAPH_KEY
from trappm_ray.model.spec_model import SpecModel, SpecPredictor
from trappm_ray.physics.memory import training_memory
from trappm_ray.physics.power import PowerModel, step_power
from trappm_ray.physics.step_model import Setting, step_time

SLUG, SPEC = "h100-sxm5-80gb-amp", "h100-sxm5-80gb"
SETTING = {"precision": "amp-fp16", "optimizer": "sgd-momentum", "memory_format": "nchw"}


def test_memory_and_step_time_errors_are_what_the_rows_say(tmp_path):
    labels = str(tmp_path / "labels")
    model = SpecModel.load()
    predictor = SpecPredictor(model, devices.get(SPEC))
    graphs, rows, physics = [], [], []
    for b in (2, 4, 8):
        g = featurize(B.cnn_model(), batch_size=b)
        graphs.append(graph_to_row(g, arch="cnn8", family="cnn"))
        mem = training_memory(g, "amp-fp16", "sgd-momentum").to_mb()
        step = predictor.predict_graphs([g], [SETTING])[0]["train_step_ms"]
        base = {"device_slug": SLUG, "device_spec": SPEC, "arch": "cnn8", "resolution": int(g.static["resolution"]),
                "batch_size": b, "status": "ok", "campaign_item": "gpu-v1/s000/cnn8@8", "recompute": "none",
                "grad_accum": 1, "harness_version": "gpu-v1", "date": "2026-11-26", **SETTING}
        watts = step_power(step_time(g, devices.get(SPEC), Setting(), "train"), devices.get(SPEC), PowerModel.load()).power_w
        # batch 8 reads its power from the energy counter (20 steps over 2 s: the mean is 2x the
        # answer) where the lagging sampled readings say less
        power = ({"power_w_mean": watts, "energy_j": watts * 2 * 2.0 / 20, "train_steps_timed": 20} if b == 8
                 else {"power_w_mean": watts * 2})
        rows.append({**base, "cuda_max_reserved_mb": mem["reserved"] * 1.25, "cuda_max_allocated_mb": mem["allocated"] * 0.8,
                     "train_step_ms": step * 2, **power, "power_window_s": 0.4 if b == 2 else 2.0})
        rows.append({**base, "recompute": "full", "cuda_max_reserved_mb": mem["reserved"] * 2, "train_step_ms": step})
        physics.append(step_time(g, devices.get(SPEC), Setting(recompute=True), "train").total_ms / step - 1)
    storage.write_table(pa.Table.from_pylist(graphs), storage.join(labels, GRAPHS_FILE))
    store.write_rows(labels, SLUG, rows)
    store.compact(labels, SLUG)

    ev = evaluate(labels, SLUG, model)
    assert (ev.rows, ev.rows_with_graph) == (6, 6)
    plain, recompute = "amp-fp16/sgd-momentum/nchw", "amp-fp16/sgd-momentum/nchw/recompute-full"
    assert ev.memory["reserved"][plain].median_signed_pct == pytest.approx(-20.0)
    assert ev.memory["reserved"][recompute].median_signed_pct == pytest.approx(-50.0)
    assert ev.memory["allocated"][plain].median_abs_pct == pytest.approx(25.0)
    assert "device_used" not in ev.memory  # no NVML readings in these rows
    spec = ev.time["spec-based"]["train_step_ms"]
    assert spec[plain].median_signed_pct == pytest.approx(-50.0) and spec[plain].rows == 3
    # the level is off, not the scaling
    assert ev.ratio["spec-based"]["train_step_ms"][plain].p90_abs_pct == pytest.approx(0.0, abs=1e-9)
    assert ev.refused["spec-based"] == {recompute: 3}
    # the step model answers every setting; its recompute rows are its own figures over the rows'
    assert ev.time["step model"]["train_step_ms"][recompute].median_signed_pct == pytest.approx(
        float(np.median(physics)) * 100)
    assert "product" not in ev.time  # no product answer passed
    # power over windows of 1 s and more only (batch 2's 0.4 s is left out)
    power = ev.time["step model"]["train_power_w"][plain]
    assert power.rows == 2 and power.median_signed_pct == pytest.approx(-50.0)

    product = lambda row, graph: {"train_step_ms": row["train_step_ms"] * 1.1}  # noqa: E731
    ev = evaluate(labels, SLUG, model, product=product)
    assert ev.time["product"]["train_step_ms"]["all"].median_signed_pct == pytest.approx(10.0)
    assert "inference_ms" not in ev.time["product"]
    text = report([ev])
    assert "CUDA memory model `reserved`" in text and "batch scaling of `train_step_ms`" in text
    assert "spec-based answer refuses: amp-fp16/sgd-momentum/nchw/recompute-full 3" in text

    # every campaign folder's rows that a check keeps, each with its own graph
    found = list(campaign_rows(labels, lambda r: r["recompute"] == "none"))
    assert sorted(r["batch_size"] for r, _ in found) == [2, 4, 8]
    assert all(g.static["batch_size"] == r["batch_size"] for r, g in found)


def test_strict_fp32_rows_are_read_as_measured():
    conv, gemm = featurize(B.cnn_model(), batch_size=2), featurize(B.gemm_model(), batch_size=2)
    row = {"precision": "fp32", "optimizer": "adamw", "allow_tf32": "none"}
    assert physics_precision(row) == row_setting(row).precision == "fp32-strict"
    assert physics_precision({**row, "allow_tf32": "conv"}) == "fp32"  # PyTorch's default
    assert physics_precision({**row, "allow_tf32": None}) == "fp32"  # public rows: the default of their time
    assert physics_precision({**row, "precision": "tf32", "allow_tf32": "all"}) == "tf32"
    answer = as_measured(lambda r, g: {"train_step_ms": 1.0})
    # the product's fp32 runs convolutions in TF32: no answer of it is the strict measurement
    assert answer(row, conv) is None
    # matrix products are strict FP32 in both: the product's answer stands
    assert answer(row, gemm) == {"train_step_ms": 1.0}


def test_rows_measured_with_cudnn_autotuning_leave_the_memory_check():
    g = featurize(B.cnn_model(), batch_size=2)
    mem = training_memory(g, "amp-fp16", "sgd-momentum").to_mb()
    row = {"arch": "cnn8", "resolution": int(g.static["resolution"]), "batch_size": 2, "recompute": "none",
           "grad_accum": 1, "cudnn_benchmark": "off", "cuda_max_reserved_mb": mem["reserved"], **SETTING}
    tuned = {**row, "cudnn_benchmark": "on", "cuda_max_reserved_mb": mem["reserved"] * 10}  # trial workspaces
    graphs = {tuple(row[k] for k in GRAPH_KEY): g}
    assert autotuned(tuned, g) and not autotuned(row, g)
    errors = memory_errors([row, tuned], graphs)["reserved"]["all"]
    assert errors.rows == 1 and errors.median_abs_pct == pytest.approx(0.0, abs=1e-9)
