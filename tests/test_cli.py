"""``trappm-ray graph``: in-process (capsys) and once as a real subprocess."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import onnx_builders as B
from trappm_ray import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

REQUIRED = {"nodes", "edges", "params", "macs", "feature_set", "unknown_ops"}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    cnn = B.to_bytes(B.cnn_model())
    paths = {
        "cnn": B.cnn_model(), "layernorm": B.layernorm_gelu_model(),
        "seq": B.transformer_block("seq"), "spatial": B.cnn_model(hw="H"),
        "external": B.external_data_model("../../etc/passwd"),
        "external_ok": B.external_data_model("weights.bin"),
        "cycle": B.cycle_model(), "if": B.if_model(),
    }
    out = {}
    for name, model in paths.items():
        out[name] = d / f"{name}.onnx"
        out[name].write_bytes(B.to_bytes(model))
    for name, data in {"truncated": cnn[: len(cnn) // 2],
                       "random": np.random.default_rng(0).bytes(2048), "empty": b""}.items():
        out[name] = d / f"{name}.onnx"
        out[name].write_bytes(data)
    out["missing"] = d / "does-not-exist.onnx"
    return {k: str(v) for k, v in out.items()}


def run_json(capsys, *argv) -> dict:
    rc = cli.main(["graph", *argv, "--json"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert captured.err == ""
    lines = captured.out.strip().splitlines()
    assert len(lines) == 1, "one JSON object on one line"
    return json.loads(lines[0])


def test_graph_json(capsys, files):
    report = run_json(capsys, files["cnn"], "--batch-size", "4")
    assert REQUIRED <= report.keys()
    want = B.cnn_expect(4)
    assert report["nodes"] == 5 and report["edges"] == 4
    assert report["params"] == want["total_params"] and report["macs"] == want["total_macs"]
    assert report["batch_size"] == 4 and report["feature_set"] == "v2"
    assert report["unknown_ops"] == {}
    assert report["file"] == files["cnn"] and report["node_features"][0] == 5
    assert report["external_data"] is False and report["data_inputs"] == ["x"]


@pytest.mark.parametrize("name", ["v1", "trappm-v1"])
def test_graph_feature_set_v1(capsys, files, name):
    report = run_json(capsys, files["layernorm"], "--batch-size", "4", "--feature-set", name)
    assert report["feature_set"] == "trappm-v1"
    assert report["node_features"] == [2, 113] and len(report["static_features"]) == 6
    assert report["unknown_ops"] == {"Gelu": 1, "LayerNormalization": 1}
    assert run_json(capsys, files["layernorm"], "--feature-set", "v2")["unknown_ops"] == {}


def test_graph_dims_and_resolution(capsys, files):
    assert run_json(capsys, files["seq"], "--dim", "seq=16")["macs"] == \
        B.transformer_expect(1, 16)["total_macs"]
    report = run_json(capsys, files["spatial"], "--resolution", "12", "--batch-size", "2")
    assert report["resolution"] == 12 and report["macs"] == B.cnn_expect(2, hw=12)["total_macs"]


def test_graph_benign_external_data(capsys, files):
    report = run_json(capsys, files["external_ok"])
    assert report["external_data"] is True and report["params"] == 137


def test_graph_text_output(capsys, files):
    assert cli.main(["graph", files["cnn"]]) == 0
    out = capsys.readouterr().out
    assert "nodes: 5" in out and "feature_set: v2" in out


# (test id, model file key, extra argv, a word the one error line must contain)
BAD = [
    ("truncated", "truncated", [], "corrupt_protobuf"),
    ("random", "random", [], ""),
    ("empty", "empty", [], "empty"),
    ("missing", "missing", [], "not a file"),
    ("external", "external", [], "external_data"),
    ("cycle", "cycle", [], "cycle"),
    ("if", "if", [], "control flow"),
    ("no_resolution", "spatial", [], "resolution"),
    ("no_dim", "seq", [], "seq"),
    ("batch_zero", "cnn", ["--batch-size", "0"], "batch_size"),
    ("bad_dim", "cnn", ["--dim", "seq"], "NAME=INT"),
]
NEEDLE = {key: needle for _, key, extra, needle in BAD if not extra}


def assert_one_error_line(err: str, needle: str) -> None:
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1, err
    assert lines[0].startswith("error:"), err
    assert "Traceback" not in err and needle in lines[0], err


@pytest.mark.parametrize("key,extra,needle", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_exits_2_with_one_line(capsys, files, key, extra, needle):
    rc = cli.main(["graph", files[key], *extra, "--json"])
    captured = capsys.readouterr()
    assert rc == 2
    assert captured.out == ""
    assert_one_error_line(captured.err, needle)


def _subprocess(*argv, timeout: int = 60):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "trappm_ray.cli", *argv], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_subprocess_success(files):
    proc = _subprocess("graph", files["cnn"], "--batch-size", "4", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert REQUIRED <= report.keys() and report["macs"] == B.cnn_expect(4)["total_macs"]


def test_subprocess_bad_inputs(files):
    """One interpreter per bad file would be slow: check two in separate processes."""
    for key in ("truncated", "external"):
        proc = _subprocess("graph", files[key], "--json")
        assert proc.returncode == 2, (key, proc.stderr)
        assert proc.stdout == ""
        assert_one_error_line(proc.stderr, NEEDLE[key])


# -- trappm-ray predict ---------------------------------------------------------------------------
PREDICT_CONTRACT = {"train_step_ms", "train_memory_mb", "inference_ms", "interval", "model_version"}


@pytest.fixture(scope="module")
def predictor_dir(tmp_path_factory) -> str:
    from predictor_builders import random_predictor

    path = str(tmp_path_factory.mktemp("predictor") / "random")
    random_predictor().save(path)
    return path


def run_predict(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main(["predict", *argv])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_predict_json_contract(capsys, files, predictor_dir):
    rc, out, err = run_predict(capsys, files["cnn"], "--batch-size", "8", "--predictor",
                               predictor_dir, "--json")
    assert rc == 0 and err == "", err
    lines = out.strip().splitlines()
    assert len(lines) == 1
    report = json.loads(lines[0])
    assert PREDICT_CONTRACT <= report.keys() and report["batch_size"] == 8
    for t in ("train_step_ms", "train_memory_mb", "inference_ms"):
        lo, hi = report["interval"][t]
        assert isinstance(report[t], float) and lo <= report[t] <= hi
    assert report["model_version"].startswith("random@") and report["model"] == files["cnn"]


def test_predict_text_report(capsys, files, predictor_dir):
    rc, out, _ = run_predict(capsys, files["cnn"], "--predictor", predictor_dir,
                             "--memory-budget-mb", "1e9", "--steps", "1000", "--price-per-hour", "2")
    assert rc == 0
    for needle in ("training step time", "training memory", "inference latency", "samples/s",
                   "no GPU fit", "largest batch <= 1e+09 MB", "1000 steps", "at 2 per GPU-hour",
                   "device test"):
        assert needle in out, (needle, out)


def test_predict_sweep_writes_png(capsys, files, predictor_dir, tmp_path):
    plot = tmp_path / "sweep.png"
    rc, out, err = run_predict(capsys, files["cnn"], "--predictor", predictor_dir, "--sweep",
                               "--sweep-max", "16", "--plot", str(plot), "--json")
    assert rc == 0, err
    report = json.loads(out)
    assert [r["batch_size"] for r in report["sweep"]] == [1, 2, 4, 8, 16]
    assert report["plot"] == str(plot) and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rc, out, _ = run_predict(capsys, files["cnn"], "--predictor", predictor_dir, "--sweep",
                             "--sweep-max", "4", "--plot", str(plot))
    assert rc == 0 and "plot written to" in out


@pytest.mark.parametrize("key,needle", [("truncated", "corrupt_protobuf"), ("empty", "empty"),
                                        ("external", "external_data"), ("missing", "not a file"),
                                        ("if", "control flow")])
def test_predict_bad_input_one_line(capsys, files, predictor_dir, key, needle):
    rc, out, err = run_predict(capsys, files[key], "--predictor", predictor_dir, "--json")
    assert rc == 2 and out == ""
    assert_one_error_line(err, needle)


def test_predict_without_default_predictor(capsys, files, monkeypatch, tmp_path):
    import trappm_ray.serving.routing as routing

    monkeypatch.setattr(routing, "DEFAULT_DIR", tmp_path / "none")
    monkeypatch.setattr(routing, "_LOADED", {})
    rc, out, err = run_predict(capsys, files["cnn"], "--json")
    assert rc == 2 and out == ""
    assert_one_error_line(err, "no default predictor")


def test_predict_subprocess_json(files, predictor_dir):
    # torch is imported here: give a busy machine more time than the featurizer-only commands
    proc = _subprocess("predict", files["cnn"], "--batch-size", "2", "--predictor", predictor_dir,
                       "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert PREDICT_CONTRACT <= json.loads(proc.stdout).keys()
    # (bad input through a real process: test_subprocess_bad_inputs, same main(); in-process above)


def test_devices_lists_shipped_predictors_and_specs(capsys):
    assert cli.main(["devices", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    shipped = {d["device"]: d for d in out["predictors"]}
    assert shipped["intel-r-xeon-r-processor-t1"]["options"]["precision"] == ["fp32"]
    assert shipped["rtx3090-amp"]["kind"] == "cuda" and shipped["rtx3090-amp"]["labels"] > 500
    specs = {d["slug"]: d for d in out["specs"]}
    assert "1g.5gb" in specs["a100-sxm4-40gb"]["mig_profiles"] and specs["rtx3090"]["memory_gb"] == 24
    assert cli.main(["devices"]) == 0 and "rtx3090-amp" in capsys.readouterr().out


def test_predict_device_spec_and_spec_table_device(capsys, files, tmp_path):
    """A GPU without a shipped predictor, by spec-table slug or a user's JSON: the shipped
    spec-based predictor, CUDA-model memory, times above the floor, and it says so."""
    from trappm_ray import devices

    h100 = devices.get("h100-sxm5-80gb")
    spec = tmp_path / "h100.json"
    spec.write_text(json.dumps({k: getattr(h100, k) for k in (
        "name", "memory_gb", "memory_bw_gbs", "peak_fp32_tflops", "peak_fp16_tensor_tflops",
        "peak_bf16_tensor_tflops", "peak_tf32_tensor_tflops", "sm_count", "l2_mb", "tdp_w")}))
    for args in (("--device-spec", str(spec)), ("--device", "h100-sxm5-80gb")):
        rc, out, err = run_predict(capsys, files["cnn"], "--batch-size", "16", *args, "--json")
        assert rc == 0, err
        r = json.loads(out)
        assert r["model_version"].startswith("gpu-spec:") and r["device"]["spec_only"]
        assert r["train_step_ms"] >= r["floors"]["train_step_ms"] > 0
        assert r["inference_ms"] >= r["floors"]["inference_ms"] > 0
        assert r["memory_terms"] and r["options"]["precision"] == "amp-fp16"
        assert any("device specs alone (no labels for this device)" in n for n in r["notes"])
    rc, out, _ = run_predict(capsys, files["cnn"], "--device-spec", str(spec), "--precision", "fp32")
    assert rc == 0 and "note: predicted from device specs alone" in out and "fp32" in out
    rc, out, err = run_predict(capsys, files["cnn"], "--device", "my-tpu")
    assert rc == 2 and out == ""
    assert_one_error_line(err, "--device-spec")


def test_devices_lists_the_spec_predictor(capsys):
    assert cli.main(["devices", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    spec = out["spec_predictor"]
    assert spec["kind"] == "gpu-spec" and "rtx3090" in spec["trained_on"]["devices"]
    assert "h100-sxm5-80gb" in spec["devices"] and "rtx3090" not in spec["devices"]
    assert {t: v > 0 for t, v in spec["lodo_mape"].items()} == {"train_step_ms": True, "inference_ms": True}
    assert {d["slug"]: d["predictor"] for d in out["specs"]}["a100-sxm4-80gb"] == "gpu-spec"
    assert cli.main(["devices"]) == 0 and "spec-based predictor gpu-spec" in capsys.readouterr().out


def test_an_unknown_device_is_refused_before_any_heavy_import(files):
    code = ("import sys; from trappm_ray.cli import main; "
            f"rc = main(['predict', {files['cnn']!r}, '--device', 'titan']); "
            "print(rc, 'torch' in sys.modules, 'trappm_ray.serving.api' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["2", "False", "False"], proc.stderr
    assert proc.stderr.strip() == ("error: unsupported_option: device 'titan' could be titan-xp, titan-rtx, "
                                   "titan-v: name one")


def test_predict_compares_several_devices_in_one_table(capsys):
    sample = "data/sample/onnx/resnet10t@64.onnx"
    rc, out, _ = run_predict(capsys, sample, "--batch-size", "64", "--device", "a100,3090", "--json")
    rows = json.loads(out)
    assert rc == 0 and [r["device"]["slug"] for r in rows] == ["a100-sxm4-80gb", "rtx3090-amp"]
    assert all(r["train_step_ms"] > 0 and r["summary"].startswith("~") for r in rows)
    rc, out, _ = run_predict(capsys, sample, "--batch-size", "64", "--device", "h100,t4")
    assert rc == 0 and "NVIDIA H100 SXM5 80GB" in out and "NVIDIA T4" in out and "fits" in out


def test_a_bad_option_has_one_code_in_the_cli_and_the_api(capsys):
    from trappm_ray import errors
    from trappm_ray.serving import api

    rc, _, err = run_predict(capsys, "data/sample/onnx/resnet10t@64.onnx", "--batch-size", "0")
    assert rc == 2 and err.strip() == "error: bad_options: batch_size must be in 1..4096, got 0"
    with pytest.raises(errors.BadOption, match="bad_options: batch_size"):
        api.PredictOptions(0)


def test_graph_and_predict_agree_on_gpu_memory(capsys):
    sample = "data/sample/onnx/resnet10t@64.onnx"
    assert cli.main(["graph", sample, "--batch-size", "64", "--optimizer", "adamw", "--json"]) == 0
    graph = json.loads(capsys.readouterr().out)
    rc, out, _ = run_predict(capsys, sample, "--batch-size", "64", "--device", "a100", "--optimizer", "adamw", "--json")
    assert rc == 0 and graph["gpu_training_memory_mb"] == pytest.approx(json.loads(out)["train_memory_mb"], abs=0.05)
    assert graph["gpu_training_memory_setting"].startswith("amp-fp16 + adamw")


def test_fsdp_over_an_onnx_file_with_its_micro_batch(capsys):
    sample = "data/sample/onnx/resnet10t@64.onnx"
    runs = {}
    for flag, layout in (("--batch-size", "dp"), ("--micro-batch", "fsdp")):
        rc, out, err = run_predict(capsys, sample, flag, "32", "--device", "h100", "--gpus", "8", "--parallel", layout,
                                   "--optimizer", "adamw", "--json")
        assert rc == 0, err
        runs[layout] = json.loads(out)
    assert runs["fsdp"]["batch_size"] == runs["dp"]["batch_size"] == 32
    assert runs["fsdp"]["distributed"]["parallel"] == "fsdp" and runs["fsdp"]["options"]["zero"] == 3
    assert runs["fsdp"]["train_memory_mb"] < runs["dp"]["train_memory_mb"]


def test_gpus_per_node_spreads_the_gpus_over_nodes(capsys):
    sample = "data/sample/onnx/resnet10t@64.onnx"
    runs = {}
    for per_node in (None, "4", "1"):
        extra = ("--gpus-per-node", per_node) if per_node else ()
        rc, out, err = run_predict(capsys, sample, "--batch-size", "32", "--device", "h100", "--gpus", "8", *extra, "--json")
        assert rc == 0, err
        runs[per_node] = json.loads(out)["distributed"]
    assert [runs[k]["nodes"] for k in (None, "4", "1")] == [1, 2, 8]
    assert runs["4"]["cluster"] == "dgx-h100, gpus_per_node 4"


@pytest.mark.parametrize("argv,needle", [
    (["missing.onnx", "--device", "h100"], "not_a_model: missing.onnx is not a file"),
    (["README.md", "--device", "h100"], "corrupt_protobuf"),
    (["CNN", "--device", "h100", "--batch-size", "0"], "bad_options: batch_size must be in 1..4096"),
    (["CNN", "--device", "h100", "--grad-accum", "0"], "bad_options: grad_accum must be in 1..4096"),
    (["CNN", "--recompute"], "unsupported_option: recompute is answered on GPUs"),
    (["CNN", "--device", "i9-10940x", "--grad-accum", "2"], "unsupported_option: grad_accum is answered on GPUs"),
    (["CNN", "--device", "h100", "--gpus", "0"], "bad_options: gpus must be in 1..65536, got 0"),
    (["SEQ", "--dim", "seq=0"], "bad_options: dim seq must be in 1..1048576, got 0"),
    (["CNN", "--dim", "seq=128"], "bad_options: --dim seq: the model has no input dimension of that name"),
    (["CNN", "--resolution", "99"], "unsupported: input 'x' has shape ['N', 3, 8, 8]: the file fixes its size"),
    (["CONFIG", "--dim", "seq=128"], "not_a_model: "),
    (["CNN", "--device", "t4", "--precision", "amp-bf16"], "unsupported_option: NVIDIA T4 cannot run amp-bf16"),
    (["CNN", "--device", "h100", "--power-limit", "10"], "unsupported_option: power limit 10 W is outside"),
    (["CNN", "--device", "h100", "--gpus", "2", "--cluster", "nosuch"], "unsupported_option: unknown cluster 'nosuch'"),
    (["CNN", "--device", "h100", "--gpus", "2", "--gpus-per-node", "0"], "unsupported_option: gpus_per_node must be at"),
    (["CNN", "--device-spec", "missing.json"], "DeviceSpecError: missing.json: cannot read device spec JSON"),
    (["CYCLE"], "cycle: graph has a cycle through node"),
    (["IF"], "unsupported: node 'if' is control flow (If)"),
    (["EXTERNAL"], "external_data: tensor 'conv.W' points to external data '../../etc/passwd' outside"),
    (["SEQ"], "unresolved_shapes: input 'x' dim 1 ('seq') is symbolic"),
    pytest.param(["resnet5000", "--device", "h100"], "is neither a file, a timm model (did you mean resnet50",
                 marks=pytest.mark.skipif(importlib.util.find_spec("timm") is None, reason="no timm")),
    pytest.param(["resnet-50"], "(did you mean resnet50",
                 marks=pytest.mark.skipif(importlib.util.find_spec("timm") is None, reason="no timm")),
])
def test_common_mistakes_are_refused_before_any_heavy_import(files, tmp_path, argv, needle):
    """What users get wrong most is answered without importing torch, torch_geometric, xgboost or
    pandas (well under a second): an option or the file's inputs before the prediction starts,
    the graph's own faults by the prediction's one featurize."""
    (tmp_path / "config.json").write_text('{"hidden_size": 8}')  # says nothing of what to build
    swap = {"CNN": files["cnn"], "SEQ": files["seq"], "CYCLE": files["cycle"], "IF": files["if"],
            "EXTERNAL": files["external"], "CONFIG": tmp_path / "config.json"}
    argv = [str(swap.get(a, a)) for a in argv]
    code = ("import sys; from trappm_ray.cli import main; "
            f"rc = main(['predict', *{argv!r}]); "
            "print(rc, *sorted(m for m in ('torch', 'torch_geometric', 'xgboost', 'pandas') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.stdout.split() == ["2"], proc.stderr
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
