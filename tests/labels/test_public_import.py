"""The importer of public GPU labels on tiny hand-written files of each source format."""
import json
from collections import Counter

import pytest

from trappm_ray.labels import public_ryujaehun, store
from trappm_ray.labels.datasheet import datasheet
from trappm_ray.labels.public import import_public, read_raw
from trappm_ray.labels.public_datasheet import version_noise
from trappm_ray.labels.public_timm import torch_version

TRAIN_HEADER = "model,train_samples_per_sec,train_step_time,train_batch_size,train_img_size,param_count\n"
INFER_HEADER = ("model,infer_img_size,infer_samples_per_sec,infer_step_time,infer_batch_size,"
                "param_count,infer_gmacs,infer_macts\n")


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _timm(root):
    t = root / "timm"
    # resnet50 at batch 256 under two torch versions (a duplicate) plus malformed rows
    _write(t / "benchmark-train-amp-nchw-pt111-cu113-rtx3090.csv", TRAIN_HEADER
           + "resnet50,1000.0,200.0,256,224,25.56\n"
           + "vit_tiny_patch16_224,3000.0,,512,224,5.7\n"           # no step time
           + "mixnet_s,2000.0,0,512,224,4.13\n"                     # zero time
           + "Bad Model!,10.0,5.0,512,224,1.0\n"                    # not a timm name
           + ",10.0,5.0,512,224,1.0\n")                             # no name at all
    _write(t / "benchmark-train-amp-nchw-pt112-cu113-rtx3090.csv", TRAIN_HEADER
           + "resnet50,1000.0,220.0,256,224,25.56\n")
    _write(t / "benchmark-train-amp-nhwc-pt112-cu113-rtx3090.csv", TRAIN_HEADER
           + "resnet50,1300.0,150.0,256,224,25.56\n")
    # inference at the same key as the training rows: one row holds both labels
    _write(t / "benchmark-infer-amp-nchw-pt112-cu113-rtx3090.csv", INFER_HEADER
           + "resnet50,224,3000.0,80.0,256,25.56,4.11,11.11\n")
    _write(t / "benchmark-infer-amp-nchw-pt240-cu124-rtx4090.csv", INFER_HEADER
           + "resnet50,224,9000.0,50.0,1024,25.56,4.11,11.11\n"
           + "eva02_enormous_patch14_clip_224,224,,,,4350.56,1132.46,497.58\n")
    _write(t / "benchmark-infer-amp-nchw-pt291-cu128-4090-dynamo.csv", INFER_HEADER
           + "resnet50,224,9500.0,40.0,1024,25.56,4.11,11.11\n")
    _write(t / "benchmark-infer-amp-nchw-pt291-cu128-4090.csv", INFER_HEADER
           + "resnet50,224,9100.0,60.0,1024,25.56,4.11,11.11\n")
    _write(t / "benchmark-odd.csv", "model\nx\n")                   # not a benchmark file


def _neusight(root):
    n = root / "neusight"
    _write(n / "DLmodel_configs" / "bert_large.json", json.dumps({"model_type": "bert"}))
    _write(n / "DLmodel_configs" / "gpt2_large.json", json.dumps({"model_type": "gpt2"}))
    label = n / "label"

    def lab(dev, name, e2e, fw=0, bw=0):
        _write(label / dev / name, json.dumps({"num_layer": 24, "e2e_latency": e2e,
                                               "fw_latency": fw, "bwall_latency": bw}))
    lab("Tesla_T4", "bert_large-inf-512-8.json", 700.0, 700.0)
    lab("Tesla_T4", "bert_large-train-512-8.json", 2100.0, 700.0, 1400.0)
    lab("Tesla_T4", "bert_large-inf-512-16.json", -3.0)                      # negative time
    lab("Tesla_T4", "llama-inf-512-2.json", 100.0)                            # no config
    lab("NVIDIA_A100-PCIE-40GB", "bert_large-inf-512-8-fusion.json", 150.0)
    lab("NVIDIA_A100-SXM4-40GB", "gpt2_large-train-1024-4-dp4.json", 450.0)
    lab("NVIDIA_A100-SXM4-40GB", "gpt2_large-train-1024-4-pp4_1.json", 1600.0)
    _write(label / "Tesla_T4" / "gpt2_large-inf-1024-4.json", "{not json")    # broken file


def _ryujaehun(root):
    r = root / "ryujaehun"
    titan = r / "results" / "TitanRTX"
    _write(titan / "config.json", json.dumps({"WARM_UP": 5, "NUM_TEST": 3, "BATCH_SIZE": 12}))
    _write(titan / "system_info.txt", "benchmark start : 2021/01/03 20:55:21\nCUDA Version : 10.2\n")
    train = "resnet18,vgg16,not_a_model\n10.0,30.0,1.0\n11.0,31.0,1.0\n12.0,29.0,1.0\n"
    _write(titan / "TITAN RTX_1_gpus__float_model_train_benchmark.csv", train)
    _write(titan / "TITAN RTX_1_gpus__float_model_inference_benchmark.csv",
           "resnet18,vgg16\n3.0,9.0\n4.0,\n5.0,9.0\n")                      # vgg16: a blank time
    _write(titan / "TITAN RTX_2_gpus__half_model_train_benchmark.csv", "resnet18\n14.0\n15.0\n")
    _write(r / "new_results" / "TITAN RTX_1_gpus__float_model_train_benchmark.csv", train)  # copy
    old = r / "results" / "TitanV"
    _write(old / "TITAN V_single_model_training_benchmark(1).csv", "resnet18\n20.0\n22.0\n")
    _write(old / "TITAN V_single_model_training_benchmark(2).csv", "resnet18\n24.0\n26.0\n28.0\n")
    _write(r / "results" / "dgx.csv", ",batchs,gpus,times\nhalf,16,1,15.6\n")


@pytest.fixture
def imported(tmp_path, monkeypatch):
    monkeypatch.setattr(public_ryujaehun, "torchvision_names", lambda: {"resnet18", "vgg16"})
    root = tmp_path / "public-gpu"
    _timm(root)
    _neusight(root)
    _ryujaehun(root)
    out = str(tmp_path / "labels")
    summary = import_public(str(root), out, imported="2026-11-24")
    return out, summary


def _rows(out, slug):
    return store.compact_labels(out, slug).to_pylist()


def _one(rows, **match):
    found = [r for r in rows if all(r[k] == v for k, v in match.items())]
    assert len(found) == 1, (match, found)
    return found[0]


def test_devices_and_unique_keys(imported):
    out, summary = imported
    assert set(summary.devices) == {
        "rtx3090-amp", "rtx4090-amp", "t4-fp32", "a100-pcie-40gb-fp32", "a100-sxm4-40gb-fp32",
        "titan-rtx-fp32", "titan-rtx-fp16", "titan-v-fp32"}
    assert set(store.device_slugs(out)) == set(summary.devices)
    for slug in summary.devices:
        rows = _rows(out, slug)
        assert len(rows) == summary.devices[slug]["rows"]
        dup = [k for k, n in Counter(tuple(r[k] for k in store.KEY) for r in rows).items() if n > 1]
        assert not dup, (slug, dup)


def test_provenance_on_every_row(imported):
    out, summary = imported
    for slug in summary.devices:
        for r in _rows(out, slug):
            for col in ("precision", "optimizer", "dtype", "memory_format", "gpus", "parallelism",
                        "compiled", "model_source", "device_spec", "source_repo", "source_commit",
                        "source_file", "license", "method", "date_imported", "n_measurements"):
                assert r[col] is not None, (slug, r["arch"], col)
            assert r["exporter"] is None and r["device_slug"] == slug
    r = _one(_rows(out, "rtx3090-amp"), arch="resnet50", memory_format="nhwc")
    assert (r["source_repo"], r["source_commit"], r["license"]) == (
        "huggingface/pytorch-image-models", "aa4b5850", "Apache-2.0")
    assert r["source_file"] == "results/benchmark-train-amp-nhwc-pt112-cu113-rtx3090.csv"
    assert "SGD" in r["method"] and r["optimizer"] == "sgd-momentum" and r["precision"] == "amp-fp16"


def test_torch_versions_are_summarised_as_median_and_spread(imported):
    out, _ = imported
    rows = _rows(out, "rtx3090-amp")
    r = _one(rows, arch="resnet50", memory_format="nchw", status="ok")
    assert r["train_step_ms"] == pytest.approx(210.0) and r["n_measurements"] == 3
    assert (r["train_step_ms_min"], r["train_step_ms_max"]) == (200.0, 220.0)
    assert r["train_step_ms_p10"] == pytest.approx(202.0) and r["train_steps_timed"] == 100
    assert r["inference_ms"] == 80.0 and r["inference_steps_timed"] == 50  # same key: one row
    assert r["torch_version"] == "1.11;1.12" and r["params"] == 25_560_000
    assert r["batch_size"] == 256 and r["resolution"] == 224 and r["family"] == "resnet"
    # channels-last is another memory format, not a duplicate
    assert _one(rows, arch="resnet50", memory_format="nhwc")["train_step_ms"] == 150.0
    raw = read_raw(out, "rtx3090-amp").to_pylist()
    assert sorted(x["train_step_ms"] for x in raw if x["arch"] == "resnet50"
                  and x["memory_format"] == "nchw" and x["train_step_ms"]) == [200.0, 220.0]
    # RTX 4090: two torch versions of eager resnet50 (rtx4090 and 4090 file names), one compiled
    r4 = _rows(out, "rtx4090-amp")
    assert _one(r4, arch="resnet50", compiled="none")["inference_ms"] == pytest.approx(55.0)
    assert _one(r4, arch="resnet50", compiled="dynamo")["inference_ms"] == 40.0


def test_malformed_rows_become_error_rows_or_issues(imported):
    out, summary = imported
    errors = {r["arch"]: r["error"] for r in _rows(out, "rtx3090-amp") if r["status"] == "error"}
    assert set(errors) == {"vit_tiny_patch16_224", "mixnet_s", "Bad Model!"}
    assert "missing" in errors["vit_tiny_patch16_224"] and "non-positive" in errors["mixnet_s"]
    assert "unknown model" in errors["Bad Model!"]
    assert _one(_rows(out, "rtx4090-amp"), arch="eva02_enormous_patch14_clip_224")["status"] == "error"
    t4 = {r["arch"] + str(r["batch_size"]): r for r in _rows(out, "t4-fp32")}
    assert t4["bert_large16"]["status"] == "error" and "non-positive" in t4["bert_large16"]["error"]
    assert "no DLmodel_configs/llama.json" in t4["llama2"]["error"]
    assert "unreadable" in t4["gpt2_large4"]["error"]
    titan = {r["arch"]: r for r in _rows(out, "titan-rtx-fp32") if r["status"] == "error"}
    assert set(titan) == {"torchvision_not_a_model"}
    issues = "\n".join(summary.issues)
    assert "benchmark-odd.csv" in issues and "no model name" in issues and "dgx.csv" in issues
    assert "identical to results/TitanRTX" in issues


def test_neusight_rows(imported):
    out, _ = imported
    t4 = _rows(out, "t4-fp32")
    r = _one(t4, arch="bert_large", batch_size=8, status="ok")
    assert (r["train_step_ms"], r["inference_ms"], r["forward_ms"], r["backward_ms"]) == (
        2100.0, 700.0, 700.0, 1400.0)
    assert (r["resolution"], r["seq_len"], r["family"], r["optimizer"], r["model_source"]) == (
        512, 512, "bert", "none", "transformers")
    assert set(r["source_file"].split(";")) == {"scripts/asplos/label/Tesla_T4/bert_large-train-512-8.json",
                                                "scripts/asplos/label/Tesla_T4/bert_large-inf-512-8.json"}
    assert _one(_rows(out, "a100-pcie-40gb-fp32"), arch="bert_large")["compiled"] == "fusion"
    multi = {r["parallelism"]: r for r in _rows(out, "a100-sxm4-40gb-fp32")}
    assert multi["dp4"]["gpus"] == 4 and multi["pp4"]["train_step_ms"] == 1600.0


def test_ryujaehun_rows(imported):
    out, _ = imported
    fp32 = _rows(out, "titan-rtx-fp32")
    r = _one(fp32, arch="torchvision_resnet18")
    assert (r["train_step_ms"], r["train_step_ms_min"], r["train_step_ms_max"]) == (11.0, 10.0, 12.0)
    assert r["inference_ms"] == 4.0 and r["n_measurements"] == 2  # the new_results copy counted once
    assert (r["batch_size"], r["resolution"], r["optimizer"], r["precision"], r["gpus"]) == (
        12, 224, "none", "fp32", 1)
    assert (r["cuda"], r["date"], r["warmup"], r["model_source"]) == ("10.2", "2021-01-03", 5, "torchvision")
    vgg = _one(fp32, arch="torchvision_vgg16")
    assert vgg["status"] == "ok" and vgg["train_step_ms"] == 30.0 and vgg["inference_ms"] is None
    half = _one(_rows(out, "titan-rtx-fp16"), arch="torchvision_resnet18")
    assert (half["gpus"], half["parallelism"], half["dtype"]) == (2, "dp2", "float16")
    # two runs of one key: the median of the run medians; the spread over all their iterations
    v = _one(_rows(out, "titan-v-fp32"), arch="torchvision_resnet18")
    assert v["train_step_ms"] == pytest.approx((21.0 + 26.0) / 2) and v["n_measurements"] == 2
    assert (v["train_step_ms_min"], v["train_step_ms_max"], v["train_steps_timed"]) == (20.0, 28.0, 5)


def test_reimport_replaces_the_device_folders(imported, tmp_path):
    out, summary = imported
    again = import_public(str(tmp_path / "public-gpu"), out, imported="2026-11-25")
    assert again.devices == summary.devices
    assert {r["date_imported"] for r in _rows(out, "rtx3090-amp")} == {"2026-11-25"}


def test_datasheet_of_an_imported_device_states_the_version_noise(imported):
    out, _ = imported
    text = datasheet(out, "rtx3090-amp")
    assert "imported public measurements" in text and "huggingface/pytorch-image-models" in text
    assert "Noise between torch versions" in text
    # 200 vs 220 ms: |200/220 - 1| = 9.1%
    assert "| `train_step_ms` | nchw | none | 1.11 | 1.12 | 1 | 9.1 | 9.1 |" in text
    assert "SGD" in text and "Adam" in text and "error" in text
    assert "measured more than once" in datasheet(out, "t4-fp32")


def test_version_noise_pairs_every_version():
    base = {k: None for k in store.COLUMNS} | {"status": "ok", "arch": "a", "memory_format": "nchw",
                                               "compiled": "none"}
    rows = [base | {"torch_version": v, "train_step_ms": t} for v, t in (("1.10", 100.0), ("1.11", 110.0),
                                                                         ("1.12", 90.0))]
    noise = {(n["a"], n["b"]): n for n in version_noise(rows)}
    assert noise[("1.10", "1.11")]["median"] == pytest.approx(100 * (1 - 100 / 110))
    assert noise[("all pairs", "")]["n"] == 3


def test_torch_version_tokens():
    assert [torch_version(t) for t in ("110", "113", "210", "291")] == ["1.10", "1.13", "2.1.0", "2.9.1"]
