import json

import pytest

from onnx_builders import cnn_model, to_bytes
from trappm_ray.evaluate import multi_gpu
from trappm_ray.labels.public import import_public


def _gavel(root, throughputs: dict):
    """A label store of Gavel's table ``throughputs`` (imported as the real one is)."""
    (root / "src" / "gavel").mkdir(parents=True)
    (root / "src" / "gavel" / "simulation_throughputs.json").write_text(json.dumps(throughputs))
    import_public(str(root / "src"), str(root / "labels"), ("gavel",), "2026-11-28")
    return root / "labels"


def _key(job: str, batch: int, n: int) -> str:
    return f"('{job} (batch size {batch})', {n})"


def test_gavel_rows_are_per_gpu_iterations_beside_the_one_gpu_iteration(tmp_path):
    labels = _gavel(tmp_path, {
        "k80": {_key("ResNet-18", 32, 1): {"null": 10.0}, _key("ResNet-18", 32, 4): {"null": 20.0},
                _key("ResNet-50", 64, 2): {"null": 0.0}, _key("ResNet-50", 16, 2): {"null": 5.0},
                _key("A3C", 4, 2): {"null": 3.0}},
        "k80_unconsolidated": {_key("ResNet-18", 32, 8): {"null": 16.0}}})
    rows = sorted(multi_gpu.gavel_rows(labels), key=lambda r: r["gpus"])
    # the job's iterations/s are summed over its GPUs: 4 GPUs at 20/s is 200 ms per GPU's iteration;
    # a zero (failed run), a job without its one-GPU run, and an unknown job are left out
    assert [(r["layout"], r["gpus"], r["measured_ms"], r["one_gpu_ms"]) for r in rows] == [
        ("packed", 4, 200.0, 100.0), ("spread", 8, 500.0, 100.0)]


def test_gavel_recovers_the_rate_the_rows_were_made_with_from_the_other_gpu(tmp_path):
    """Rows made by the ring model at one bus bandwidth on both GPUs: leave-one-GPU-out fits it back."""
    onnx, rate = to_bytes(cnn_model(batch="N")), multi_gpu.BUS_GRID[40]
    g = {gpu: {_key("ResNet-18", 32, n): {"null": 1e3 / one_ms if n == 1 else 1.0} for n in (1, 2, 4, 8)}
         for gpu, one_ms in (("k80", 100.0), ("p100", 40.0))}
    for r in multi_gpu.gavel(lambda w: onnx, _gavel(tmp_path / "draft", g))["rows"]:  # shares, gradient bytes
        g[r["gpu"]][_key("ResNet-18", 32, r["gpus"])] = {"null": r["gpus"] * 1e3 / multi_gpu._predicted([r], "packed", rate)[0]}
    out = multi_gpu.gavel(lambda w: onnx, _gavel(tmp_path / "made", g))["summary"]
    assert set(out) == {"k80 packed", "p100 packed"}
    for v in out.values():
        assert v["rows"] == 3 and v["rate"] == pytest.approx(rate) and v["mape"] < 1e-6 and v["no_comm_mape"] > 0


def test_neusight_rows_name_the_layout_and_the_micro_batch(tmp_path):
    src = tmp_path / "src" / "neusight"
    (src / "DLmodel_configs").mkdir(parents=True)
    (src / "DLmodel_configs" / "gpt2_large.json").write_text(json.dumps({"model_type": "gpt2"}))
    gpu = src / "label" / "NVIDIA_A100-SXM4-40GB"
    gpu.mkdir(parents=True)
    for name, ms in (("dp4", 450.0), ("tp4", 480.0), ("pp4_1", 1600.0)):
        (gpu / f"gpt2_large-train-1024-4-{name}.json").write_text(json.dumps({"e2e_latency": ms}))
    (gpu / "gpt2_large-train-1024-4.json").write_text(json.dumps({"e2e_latency": 1.0}))  # one GPU: not a row
    import_public(str(tmp_path / "src"), str(tmp_path / "labels"), ("neusight",), "2026-11-28")
    result = multi_gpu.neusight(lambda r: r["measured_ms"] * 1.1, tmp_path / "labels")
    got = {r["parallel"]: (r["micro_batch"], r["global_batch"], r["gpus"], r["device"]) for r in result["rows"]}
    assert got == {"dp=4": (1, 4, 4, "a100-sxm4-40gb"), "tp=4": (4, 4, 4, "a100-sxm4-40gb"),
                   "pp=4": (4, 4, 4, "a100-sxm4-40gb")}
    assert result["mape"] == pytest.approx(10.0) and "| dp=4 (micro-batch 1) | 450 | 495 | +10.0% |" in \
        multi_gpu.markdown({"summary": {}}, result)


def test_dataparallel_scaling_is_each_models_n_gpu_iteration_over_its_one_gpu_one(tmp_path, monkeypatch):
    """ryujaehun's files imported as the real ones are: the median over models measured on 1-4 GPUs."""
    from trappm_ray.labels import public_ryujaehun

    monkeypatch.setattr(public_ryujaehun, "torchvision_names", lambda: {"resnet18", "vgg16", "alexnet"})
    folder = tmp_path / "src" / "ryujaehun" / "results" / "TitanRTX"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"WARM_UP": 5, "NUM_TEST": 2, "BATCH_SIZE": 12}))
    times = {1: (10.0, 40.0, 5.0), 2: (20.0, 60.0, None), 3: (25.0, 100.0, None), 4: (30.0, 80.0, None)}
    for n, (r18, vgg, alex) in times.items():
        cols = ["resnet18", "vgg16"] + (["alexnet"] if alex else [])
        vals = [r18, vgg] + ([alex] if alex else [])
        body = ",".join(cols) + "\n" + ("\n".join(",".join(str(v) for v in vals) for _ in range(2))) + "\n"
        (folder / f"TITAN RTX_{n}_gpus__float_model_train_benchmark.csv").write_text(body)
    import_public(str(tmp_path / "src"), str(tmp_path / "labels"), ("ryujaehun",), "2026-11-30")
    got = multi_gpu.dataparallel_scaling(tmp_path / "labels")
    # alexnet, measured on one GPU only, is left out; medians of (2, 1.5), (2.5, 2.5), (3, 2)
    assert got == {"titan-rtx-fp32": {"models": 2, "x2": pytest.approx(1.75), "x3": pytest.approx(2.5),
                                      "x4": pytest.approx(2.5)}}
    assert "DataParallel" in multi_gpu.markdown({"summary": {}}, {"rows": [], "mape": None}, got)
