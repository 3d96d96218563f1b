"""Batch-scaling and setting-move evaluations: source readers and per-sweep errors."""
from __future__ import annotations

import json
import shutil

import pytest

from trappm_ray.corpus import workload_models
from trappm_ray.evaluate import batch_scaling as B
from trappm_ray.evaluate import power
from trappm_ray.evaluate import setting_moves
from trappm_ray.evaluate.step_model_report import markdown
from trappm_ray.graph.featurize import featurize
from trappm_ray.labels.public import import_public

SAMPLE = "data/sample/onnx/resnet10t@64.onnx"


def _sources(root):
    for folder in ("imagenet", "cifar10", "bert"):
        (root / "pollux" / folder).mkdir(parents=True)
        (root / "pollux" / folder / "placements.csv").write_text(
            "placement,local_bsz,step_time,sync_time\n1,40,0.2,0.001\n1,20,0.12,0.001\n11,20,0.3,0.1\n")
    (root / "gavel").mkdir()
    (root / "gavel" / "simulation_throughputs.json").write_text(json.dumps({
        "k80": {"('ResNet-50 (batch size 16)', 1)": {"null": 4.0}, "('ResNet-50 (batch size 32)', 1)": {"null": 2.5},
                "('ResNet-50 (batch size 32)', 2)": {"null": 4.0}, "('A3C', 1)": {"null": 1.0}},
        "p100": {"('LM (batch size 5)', 1)": {"null": 0.0}}}))


def test_one_gpu_sweeps_come_from_the_label_store_sorted_by_batch(tmp_path):
    _sources(tmp_path / "src")
    import_public(str(tmp_path / "src"), str(tmp_path / "labels"), ("pollux", "gavel"), "2026-11-29")
    sweeps = B.one_gpu_sweeps(tmp_path / "labels")
    pollux = [s for s in sweeps if s.source == "pollux"]
    assert [s.workload for s in pollux] == ["bert_base_qa", "cifar_resnet18", "resnet50"]
    assert pollux[2].batches == (20, 40) and pollux[2].measured_ms == pytest.approx((120.0, 200.0))
    gavel = [s for s in sweeps if s.source == "gavel"]  # one GPU only; no throughput, no row
    assert len(gavel) == 1 and gavel[0].device == "k80" and gavel[0].batches == (16, 32)
    assert gavel[0].measured_ms == pytest.approx((250.0, 400.0))  # 1 / iterations per second


def test_a_sweep_scores_ratios_to_its_largest_batch(tmp_path):
    shutil.copy(SAMPLE, tmp_path / "resnet50.onnx")  # a stand-in graph under the workload's cache name
    sweep = B.Sweep("test", "resnet50", "t4", (8, 16, 32), (10.0, 16.0, 30.0))
    r = B.evaluate_sweep(sweep, tmp_path, answer=lambda *a: 2.0 * a[1])
    assert len(r.ratio_error) == 2 and len(r.absolute_error) == 3
    assert r.linear_ratio_error == pytest.approx([(8 / 32) / (10 / 30) - 1, (16 / 32) / (16 / 30) - 1])
    assert r.product_ratio_error == r.linear_ratio_error and r.product_ms == [16.0, 32.0, 64.0]
    summary = B.summary([r])
    assert summary["test"]["linear_ratio_error"]["n"] == 2 and "product_absolute_error" in summary["test"]
    text = markdown({"summary": summary, "sweeps": [r.__dict__]}, {"summary": {}}, "cmd", 1.0)
    assert "| test | 2 |" in text and "resnet50" in text


def test_workloads_build_the_graphs_their_sources_state():
    g = featurize(workload_models.export("cifar_resnet18"), 4)
    assert g.static["params"] == pytest.approx(11.17e6, rel=0.01)  # CIFAR ResNet-18, 10 classes
    first_conv = g.ops.index("Conv")
    assert g.out_shape[first_conv][:4].tolist() == [4, 64, 32, 32]  # stride-1 stem at 32 px
    assert "MaxPool" not in g.ops
    ae = featurize(workload_models.export("recoder_ae"), 2)
    assert ae.static["params"] == pytest.approx(2 * 26744 * 200 + 200 + 26744)
    with pytest.raises(KeyError, match="unknown workload"):
        workload_models.build("nope")


def test_setting_moves_on_the_committed_labels_beat_the_floor_ratio():
    """ryujaehun's fp16 / fp32 pairs: the step model's move is closer than the roofline floor's."""
    found = setting_moves.summary(setting_moves.pairs("data/labels", ("train_step_ms",)))
    move = found["train_step_ms fp16/fp32"]
    assert move["n"] >= 100 and move["mape"] < move["floor_mape"]


def test_optimizer_pairs_move_between_two_optimizers_at_one_batch_and_the_highest_limit():
    graphs = {("cifar_shufflenetv2", 64): featurize(SAMPLE, 64)}  # a stand-in graph under the workload's name
    rows = [power.PowerRow("v100-pcie-32gb", "cifar_shufflenetv2", 32, 64, opt, limit, ms, 150.0)
            for opt, ms in (("adam", 10.0), ("adadelta", 11.0)) for limit in (150.0, 250.0)]
    found = setting_moves.optimizer_pairs(rows, graphs)
    assert len(found) == 1 and (found[0].to, found[0].frm) == ("adadelta", "adam")
    assert found[0].measured_ratio == pytest.approx(1.1) and found[0].predicted_ratio > 1.0
