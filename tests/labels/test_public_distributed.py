"""The importer of public multi-GPU runs (vTrain, Pollux, Gavel) on tiny hand-written source files."""
import json

import pyarrow.parquet as pq
import pytest

from trappm_ray.corpus import keys, text_models
from trappm_ray.labels import public_distributed as D
from trappm_ray.labels.public import import_public

VTRAIN_HEADER = ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,"
                 "tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)")


def _sources(root):
    v = root / "vtrain" / "data"
    v.mkdir(parents=True)
    # the source's byte-order mark and CRLF line ends
    (v / "ground_truth_single.csv").write_bytes(("\ufeff" + VTRAIN_HEADER + "\r\n4,16,2,1024,16,12,1024,2,2,1,300.5\r\n"
                                                 "8,16,2,1024,16,12,1024,2,3,1,310.0\r\n").encode())
    (v / "ground_truth_multi.csv").write_bytes(("\ufeffParameters (billion)," + VTRAIN_HEADER
                                                + "\r\n3.6,64,512,8,3072,32,30,2048,1,64,1,3566.5\r\n").encode())
    p = root / "pollux" / "cifar10"
    p.mkdir(parents=True)
    (p / "placements.csv").write_text("placement,local_bsz,step_time,sync_time\n1,32,0.04,0.001\n22,32,0.1,0.05\n"
                                      "211,32,0.12,0.07\n4,32,,0.01\n22,big,0.1,0.05\n")
    g = root / "gavel"
    g.mkdir()
    (g / "simulation_throughputs.json").write_text(json.dumps({
        "k80": {"('ResNet-18 (batch size 32)', 1)": {"null": 10.0}, "('ResNet-18 (batch size 32)', 4)": {"null": 20.0},
                "('ResNet-50 (batch size 128)', 2)": {"null": 0.0}, "('A3C', 1)": {"null": 3.0}},
        "k80_unconsolidated": {"('ResNet-18 (batch size 32)', 1)": {"null": 10.0},
                               "('ResNet-18 (batch size 32)', 8)": {"null": 16.0}}}))


@pytest.fixture
def imported(tmp_path):
    _sources(tmp_path / "src")
    summary = import_public(str(tmp_path / "src"), str(tmp_path / "labels"), ("vtrain", "pollux", "gavel"), "2026-11-28")
    rows = {slug: pq.read_table(tmp_path / "labels" / slug / "labels.parquet").to_pylist() for slug in summary.devices}
    return summary, rows


def test_vtrain_rows_carry_the_layout_the_batches_and_the_interconnect(imported):
    summary, rows = imported
    a100 = {r["gpus"]: r for r in rows["a100-sxm4-80gb-amp"]}
    one, bad, many = a100[4], a100[8], a100[64]
    assert (one["arch"], one["parallelism"], one["batch_size"], one["grad_accum"], one["global_batch"]) == \
        ("gpt_h1024_a16_l12", "tp2-pp1-dp2", 2, 4, 16)
    assert (one["placement"], one["nodes"], one["recompute"], one["precision"], one["optimizer"]) == \
        ("1x4", 1, "block", "amp-fp16", "adam")
    assert one["train_step_ms"] == 300.5 and one["source_repo"] == "VIA-Research/vTrain" and "800 Gb/s" in one["cluster"]
    assert bad["status"] == "error" and "do not match the layout" in bad["error"]  # 2 x 3 x 1 is not 8 GPUs
    assert (many["placement"], many["nodes"], many["resolution"], many["grad_accum"]) == ("8x8", 8, 2048, 1)
    assert summary.devices["a100-sxm4-80gb-amp"]["ok"] == 2


def test_pollux_rows_keep_each_placement_and_the_measured_sync(imported):
    _, rows = imported
    t4 = {r["placement"]: r for r in rows["t4-fp32"] if r["batch_size"] is not None}
    assert set(t4) == {"1x1", "2x2", "2+1+1", "1x4"}
    assert (t4["2x2"]["gpus"], t4["2x2"]["nodes"], t4["2x2"]["parallelism"]) == (4, 2, "dp4")
    assert t4["2x2"]["train_step_ms"] == pytest.approx(100.0) and t4["2x2"]["allreduce_ms"] == pytest.approx(50.0)
    assert t4["1x1"]["parallelism"] == "single" and t4["1x4"]["status"] == "error"  # no step time
    assert t4["2+1+1"]["arch"] == "cifar_resnet18" and t4["2+1+1"]["model_source"] == "workload"
    bad = [r for r in rows["t4-fp32"] if r["batch_size"] is None]
    assert len(bad) == 1 and bad[0]["status"] == "error" and "local_bsz 'big'" in bad[0]["error"]


def test_gavel_rows_are_per_gpu_iterations_packed_or_spread(imported):
    _, rows = imported
    k80 = {(r["placement"], r["gpus"]): r for r in rows["k80-fp32"]}
    assert set(k80) == {("packed", 1), ("packed", 4), ("packed", 2), ("spread", 8)}  # spread x1 is packed's run
    assert k80[("packed", 4)]["train_step_ms"] == pytest.approx(200.0)
    assert k80[("spread", 8)]["train_step_ms"] == pytest.approx(500.0)
    assert k80[("packed", 2)]["status"] == "error" and k80[("packed", 2)]["arch"] == "torchvision_resnet50"


def test_every_distributed_arch_has_a_model_source_that_builds_it():
    assert text_models.config_dict("gpt_h3072_a32_l30") == {
        "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 3072, "n_head": 32, "n_layer": 30,
        "vocab_size": 50257, "n_positions": 2048}
    assert keys.source_of("gpt_h1024") == "timm" and text_models.gpt_shape_config("gpt_h1024") is None
    assert [keys.source_of(a) for a in ("gpt_h1024_a16_l12", "cifar_resnet18", "lstm_lm", "torchvision_resnet50")] == \
        ["hf", "workload", "workload", "torchvision"]
    assert D.placement([4, 4]) == "2x4" and D.placement([2, 1, 1]) == "2+1+1"
