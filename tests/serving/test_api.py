"""The Python API: ``trappm_ray.serving.api`` and its derived quantities (no Ray, no server)."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

import onnx_builders as B
import trappm_ray
from predictor_builders import random_predictor
from trappm_ray import devices, errors
from trappm_ray.model.manifest import Device
from trappm_ray.model.compositions import held_at
from trappm_ray.model.launch import step_host_us
from trappm_ray.physics.step_model import device_scale, step_time
from trappm_ray.serving import api as P
from trappm_ray.serving.app import ApiError, parse_options
from trappm_ray.serving.batch import file_options
from trappm_ray.serving import routing as R

SAMPLE_FILE = "data/sample/onnx/resnet10t@64.onnx"
from trappm_ray.graph.featurize import featurize
from trappm_ray.model.predictor import PredictorError

CONTRACT = {"train_step_ms", "train_memory_mb", "inference_ms", "interval", "model_version",
            "device", "batch_size", "gpu_profiles", "smallest_profile", "throughput_samples_s"}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("predictor") / "random")
    random_predictor().save(path)
    return path


def test_predict_bytes_path_and_contract(saved, tmp_path):
    f = tmp_path / "cnn.onnx"
    f.write_bytes(B.to_bytes(B.cnn_model()))
    a = trappm_ray.predict(str(f), batch_size=4, predictor=saved)
    b = P.predict(f.read_bytes(), 4, predictor=saved)
    assert isinstance(a, P.Prediction) and a.model == str(f) and b.model == "<bytes>"
    assert a.train_step_ms == b.train_step_ms and a.model_sha256 == b.model_sha256
    d = a.to_dict()
    assert CONTRACT <= d.keys() and d["batch_size"] == 4 and d["train_power_w"] is None
    for t in ("train_step_ms", "train_memory_mb", "inference_ms"):
        e = getattr(a, t)
        assert 0 <= e.low <= e.value <= e.high and d["interval"][t] == [e.low, e.high]
        assert e.high - e.value == pytest.approx(1.96 * e.std)
    assert d["model_version"].startswith("random@") and d["device"]["slug"] == "test-device"
    assert d["graph"]["nodes"] == 5 and d["graph"]["params"] == B.cnn_expect(4)["total_params"]
    assert a.throughput_samples_s == pytest.approx(4e3 / a.train_step_ms.value)
    assert a.training_cost is None and a.max_batch_size is None


def test_predict_matches_predictor(saved):
    """The API adds nothing to the predictor's own numbers."""
    pred = P.load_predictor(saved)
    want = pred.predict_graphs([featurize(B.cnn_model(), batch_size=8)])[0]
    got = P.predict(B.cnn_model(), 8, predictor=pred)
    assert got.train_memory_mb.value == want["train_memory_mb"]
    assert got.inference_ms.std == want["inference_ms_std"]


def test_dims_resolution_and_cost(saved):
    p = P.predict(B.transformer_block("seq"), 2, predictor=saved, dims={"seq": 16}, steps=5000,
                  price_per_hour=3.0, interval_z=0.0)
    assert p.train_step_ms.low == p.train_step_ms.value == p.train_step_ms.high
    c = p.training_cost
    assert c.hours == pytest.approx(5000 * p.train_step_ms.value / 3.6e6)
    assert c.cost == pytest.approx(c.hours * 3.0) and p.cost(10, 1.0).steps == 10
    with pytest.raises(errors.UnresolvedShapes):
        P.predict(B.cnn_model(hw="H"), 1, predictor=saved)
    assert P.predict(B.cnn_model(hw="H"), 1, predictor=saved, resolution=12).graph["macs"] == \
        B.cnn_expect(1, hw=12)["total_macs"]


def test_budget_in_prediction(saved):
    p = P.predict(B.cnn_model(), 1, predictor=saved, memory_budget_mb=1e9)
    assert p.max_batch_size == 4096 and p.to_dict()["max_batch_size"] == 4096
    assert P.predict(B.cnn_model(), 1, predictor=saved, memory_budget_mb=1).max_batch_size == 0


def test_predict_many_isolates_bad_models(saved):
    opts = P.PredictOptions(2)
    good = B.to_bytes(B.cnn_model())
    items = [(good, opts, "a"), (b"\x08garbage", opts, "b"),
             (B.to_bytes(B.external_data_model("../../etc/passwd")), opts, "c"),
             (B.to_bytes(B.if_model()), opts, "d"), (good, P.PredictOptions(3), "e")]
    out = P.predict_many(items, P.load_predictor(saved))
    assert [type(r).__name__ for r in out] == ["Prediction", "CorruptModel", "ExternalData",
                                               "UnsupportedConstruct", "Prediction"]
    assert out[0].batch_size == 2 and out[4].batch_size == 3 and out[4].model == "e"


@pytest.mark.parametrize("src,exc", [(b"", errors.CorruptModel), (b"\x00" * 50, errors.ModelError),
                                     ("no/such/file.onnx", errors.NotAModel)])
def test_bad_input_raises_model_error(saved, src, exc):
    with pytest.raises(exc) as info:
        P.predict(src, predictor=saved)
    assert "\n" not in str(info.value) and info.value.status < 500


def test_bad_options(saved):
    for kw in ({"batch_size": 0}, {"memory_budget_mb": -1}, {"price_per_hour": 0}):
        with pytest.raises(ValueError):
            P.predict(B.cnn_model(), predictor=saved, **{"batch_size": 1, **kw})


def test_missing_default_is_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setattr(R, "DEFAULT_DIR", tmp_path / "default")
    monkeypatch.setattr(R, "_LOADED", {})
    with pytest.raises(PredictorError, match="no default predictor") as info:
        P.predict(B.cnn_model())
    assert "\n" not in str(info.value)
    with pytest.raises(PredictorError, match="unknown device 'my-tpu'.*--device-spec"):
        P.load_predictor(None, device="my-tpu")


def test_device_selects_and_checks(saved, monkeypatch, tmp_path):
    shipped = tmp_path / "predictors"
    random_predictor().save(str(shipped / "default"))
    monkeypatch.setattr(R, "DEFAULT_DIR", shipped / "default")
    assert P.load_predictor(None, device="test-device").manifest.device.slug == "test-device"
    with pytest.raises(PredictorError, match="not 'other'"):
        P.load_predictor(saved, device="other")


def test_device_kind():
    pred = random_predictor()
    assert P.device_of(pred)["kind"] == "unknown"
    pred.manifest = pred.manifest.replace(device=Device.from_dict({"slug": "intel-r-xeon-r-processor-t1", "name": "Intel Xeon"}))
    assert P.device_of(pred)["kind"] == "cpu"
    pred.manifest = pred.manifest.replace(device=Device.from_dict({"slug": "nvidia-h100", "name": "NVIDIA H100", "kind": "cuda"}))
    assert P.device_of(pred)["kind"] == "cuda"


def test_import_is_cheap_and_lazy():
    code = ("import sys, trappm_ray; assert 'torch' not in sys.modules; "
            "assert 'trappm_ray.serving.api' not in sys.modules; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_package_attribute_is_the_predict_function():
    from trappm_ray.serving.api import predict

    assert trappm_ray.predict is predict


@pytest.mark.slow
def test_torch_module_exported_on_the_fly(saved):
    torch = pytest.importorskip("torch")
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                              torch.nn.Flatten(), torch.nn.Linear(8, 4))
    p = P.predict(net, 16, predictor=saved, resolution=32)
    assert p.batch_size == 16 and p.graph["params"] == sum(x.numel() for x in net.parameters())
    assert p.model == "Sequential"


def test_training_setting_defaults_to_the_labels_and_refuses_the_unseen(saved):
    p = P.predict(B.cnn_model(), 2, predictor=saved)
    assert p.options == {"precision": "fp32", "optimizer": "adam", "gpus": 1, "memory_format": None}
    assert p.to_dict()["options"]["optimizer"] == "adam"
    with pytest.raises(errors.UnsupportedOption, match="trained on precision fp32"):
        P.predict(B.cnn_model(), 2, predictor=saved, precision="amp-fp16")


def test_gpu_predictor_without_memory_labels_reports_the_memory_model(tmp_path):
    pred = random_predictor(targets=("train_step_ms", "inference_ms"), batch_affine=())
    pred.manifest = pred.manifest.replace(device=Device.from_dict({"slug": "rtx3090-amp", "name": "RTX 3090", "kind": "cuda"}))
    pred.manifest = pred.manifest.replace(options={"precision": ["amp-fp16"], "optimizer": ["sgd"], "gpus": [1]})
    p = P.predict(B.cnn_model(), 8, predictor=pred)
    m = p.train_memory_mb
    assert p.memory_terms["device_used"] == pytest.approx(m.value, rel=1e-3)
    assert m.low <= m.value <= m.high and m.low >= p.memory_terms["floor"]
    assert p.memory_terms["context"] > 0 and p.smallest_profile is not None
    assert p.to_dict()["memory_terms"]["weights"] >= 0


def test_budget_search_on_a_gpu_predictor_uses_the_memory_model():
    pred = random_predictor(targets=("train_step_ms",), batch_affine=())
    pred.manifest = pred.manifest.replace(device=Device.from_dict({"slug": "rtx3090-amp", "name": "RTX 3090", "kind": "cuda"}))
    p = P.predict(B.cnn_model(), 1, predictor=pred, memory_budget_mb=2000)
    assert p.max_batch_size >= 1 and p.train_memory_mb.value < 2000


@pytest.mark.parametrize("parallel", [None, "fsdp"])
def test_the_largest_batch_of_a_data_parallel_job_is_one_gpus(parallel):
    """With gpus 8 the budget holds one GPU's memory (DDP's gradient copy, ZeRO's shards): the
    batch found fits it and the next does not, read from the answers themselves."""
    found = P.predict(SAMPLE_FILE, 16, device="h100", gpus=8, parallel=parallel, memory_budget_mb=2000).max_batch_size
    assert found > 16
    at, over = (P.predict(SAMPLE_FILE, b, device="h100", gpus=8, parallel=parallel).train_memory_mb.high
                for b in (found, found + 1))
    assert at <= 2000 < over


def test_gpu_answers_carry_power_energy_and_a_power_limits_slowdown():
    free = P.predict(SAMPLE_FILE, 256, device="v100-pcie-32gb")
    assert free.train_power_w is not None and free.power and free.power["limit_w"] == 250.0
    assert free.train_power_w.low <= free.train_power_w.value <= free.train_power_w.high <= 250.0
    assert free.power["energy_per_step_j"] == pytest.approx(free.train_power_w.value * free.train_step_ms.value / 1e3)
    low, high = free.power["inference_power_interval_w"]
    assert low < free.power["inference_power_w"] <= high <= 250.0
    capped = P.predict(SAMPLE_FILE, 256, device="v100-pcie-32gb", power_limit_w=110)
    assert capped.train_power_w.value <= 110 + 1e-6 and capped.power["clock"] < 1.0
    assert capped.train_step_ms.value > free.train_step_ms.value
    assert any("under the 110 W limit" in n for n in capped.notes)
    costed = P.predict(SAMPLE_FILE, 256, device="v100-pcie-32gb", steps=1000, price_per_kwh=0.25)
    c = costed.training_cost
    assert c.cost is None and c.energy_kwh == pytest.approx(c.hours * costed.train_power_w.value / 1e3)
    assert c.energy_cost == pytest.approx(c.energy_kwh * 0.25)
    with pytest.raises(errors.UnsupportedOption, match="outside what the"):
        P.predict(SAMPLE_FILE, 256, device="v100-pcie-32gb", power_limit_w=500)
    with pytest.raises(errors.UnsupportedOption, match="power limit applies to a GPU"):
        P.predict(SAMPLE_FILE, 4, device="i9-10940x", power_limit_w=100)


def test_layers_break_the_step_down_costliest_first():
    p = P.predict(SAMPLE_FILE, 64, device="a100", layers=5)
    names = [r["layer"] for r in p.layers]
    # the deep stem at 32 x 32 and the last stage lead (split-K fills the SMs for the last stage's
    # few output tiles of long reductions, so at 64 px neither dominates by far)
    assert len(names) == 5 and set(names[:2]) == {"conv1", "layer4"}
    shares = [r["share"] for r in p.layers]
    assert shares == sorted(shares, reverse=True) and 0.8 < sum(shares) <= 1.0 + 1e-9
    assert all(r["params"] >= 0 and r["macs"] >= 0 and r["activation_mb"] >= 0 for r in p.layers)
    assert p.to_dict()["layers"] == p.layers and P.predict(SAMPLE_FILE, 64, device="a100").layers is None


def test_several_gpus_are_data_parallel_on_a_cluster():
    one = P.predict(SAMPLE_FILE, 64, device="a100")
    many = P.predict(SAMPLE_FILE, 64, device="a100", gpus=16)
    d = many.distributed
    assert d["gpus"] == 16 and d["nodes"] == 2 and d["cluster"] == "dgx-a100" and d["global_batch"] == 1024
    assert many.train_step_ms.value == pytest.approx(one.train_step_ms.value + d["exposed_allreduce_ms"])
    assert many.throughput_samples_s == pytest.approx(16 * 64e3 / many.train_step_ms.value)
    assert many.train_memory_mb.value > one.train_memory_mb.value  # DDP's gradient buckets
    # a GPU the cluster table has no server of: PCIe of its generation, said to be assumed
    l4 = P.predict(SAMPLE_FILE, 64, device="l4", gpus=4)
    assert l4.distributed["cluster"] == "pcie4-server" and any("PCIe 4.0 x16 (assumed" in n for n in l4.notes)
    assert P.predict(SAMPLE_FILE, 64, device="l4", gpus=4, cluster="pcie-l40s-8x").distributed["nodes"] == 1


def test_zero_and_fsdp_shard_any_graphs_data_parallel_step():
    """``parallel`` zero1-3 / fsdp on an ONNX graph: the data-parallel step with ZeRO's collectives,
    each GPU's memory with its states sharded (it was refused: 'plan reads a transformers config')."""
    dp = P.predict(SAMPLE_FILE, 64, device="a100", gpus=8, optimizer="adamw")
    staged = {z: P.predict(SAMPLE_FILE, 64, device="a100", gpus=8, optimizer="adamw", parallel=z)
              for z in ("zero1", "zero2", "fsdp")}
    assert [p.distributed["parallel"] for p in staged.values()] == ["zero1", "zero2", "fsdp"]
    assert [p.options["zero"] for p in staged.values()] == [1, 2, 3] and dp.options["zero"] == 0
    memory = [p.train_memory_mb.value for p in (dp, *staged.values())]
    # FSDP holds two layers gathered whole: on a 5M-parameter net about what ZeRO-2 holds
    assert memory[0] > memory[1] > memory[2] and memory[3] < memory[0]
    floors = [p.floors["train_memory_mb"] for p in staged.values()]
    assert floors == sorted(floors, reverse=True) and all(m >= f for m, f in zip(memory[1:], floors))
    assert all(p.train_step_ms.value > 0 and p.throughput_samples_s > 0 for p in staged.values())
    # the step: one GPU's, plus what the collectives leave exposed, less the optimizer update sharding saves
    one = P.predict(SAMPLE_FILE, 64, device="a100", optimizer="adamw")
    for p in (dp, *staged.values()):
        d = p.distributed
        assert d["exposed_allreduce_ms"] >= 0 and d["optimizer_saved_ms"] >= 0
        assert p.train_step_ms.value == pytest.approx(
            one.train_step_ms.value + d["exposed_allreduce_ms"] - d["optimizer_saved_ms"])
    assert dp.distributed["optimizer_saved_ms"] == 0 < staged["zero1"].distributed["optimizer_saved_ms"]
    # what a GPU sends: DDP all-reduces fp32 gradients; ZeRO-1/2 reduce-scatter them and gather the half
    # weights once (3/4 of it), FSDP gathers them for the forward and the backward (as much)
    sent = {k: p.distributed["network_bytes_per_gpu"] for k, p in {"dp": dp, **staged}.items()}
    assert sent["zero1"] == sent["zero2"] == pytest.approx(0.75 * sent["dp"])
    assert sent["fsdp"] == pytest.approx(sent["dp"])
    assert any("ZeRO-3 (FSDP): each GPU keeps 1/8 of the weights" in n for n in staged["fsdp"].notes)
    assert any("not checked against measured ZeRO or FSDP steps" in n for n in staged["zero1"].notes)
    with pytest.raises(errors.BadOption, match="ZeRO 3 shards over data-parallel GPUs"):
        P.PredictOptions(8, zero=3)
    # the same options over HTTP and in the batch job; a tensor or pipeline layout stays a config's
    assert parse_options({"batch_size": "64", "gpus": "8", "parallel": "fsdp"}, 4096).zero == 3
    with pytest.raises(ApiError, match="tensor or pipeline layout is answered for a transformers config"):
        parse_options({"batch_size": "64", "gpus": "8", "parallel": "tp=2"}, 4096)
    assert file_options(64, None, {"gpus": 8}, "zero2").zero == 2 and file_options(64, None, {"gpus": 8}, "tp=2") is None


def test_data_parallel_cost_and_energy_count_every_gpu():
    one = P.predict(SAMPLE_FILE, 64, device="a100", steps=1000, price_per_hour=2.0)
    many = P.predict(SAMPLE_FILE, 64, device="a100", gpus=8, steps=1000, price_per_hour=2.0)
    c1, c8 = one.training_cost, many.training_cost
    assert c8.cost == pytest.approx(8 * c8.hours * 2.0) and c1.cost == pytest.approx(c1.hours * 2.0)
    assert c8.energy_kwh == pytest.approx(8 * c8.hours * many.train_power_w.value / 1e3)
    assert many.power["total_train_power_w"] == pytest.approx(8 * many.power["train_power_w"])


def test_checkpointing_and_gradient_accumulation_on_a_gpu():
    plain = P.predict(SAMPLE_FILE, 256, device="a100", precision="amp-bf16", optimizer="adamw")
    ckpt = P.predict(SAMPLE_FILE, 256, device="a100", precision="amp-bf16", optimizer="adamw", recompute=True)
    accum = P.predict(SAMPLE_FILE, 256, device="a100", precision="amp-bf16", optimizer="adamw", grad_accum=4)
    # a second forward per block: a longer step, and less memory kept for backward
    assert ckpt.train_step_ms.value > plain.train_step_ms.value
    deep = B.residual_chain(blocks=8, d=256)  # activations far above the allocator's rounding
    kept, freed = (P.predict(deep, 4096, device="a100", precision="amp-bf16", optimizer="adamw", recompute=r)
                   for r in (False, True))
    assert freed.memory_terms["activations_saved"] < kept.memory_terms["activations_saved"]
    assert freed.train_memory_mb.value < kept.train_memory_mb.value
    # four passes, one optimizer step: more time per step, more samples per second
    assert 3 * plain.train_step_ms.value < accum.train_step_ms.value < 4 * plain.train_step_ms.value
    assert accum.throughput_samples_s == pytest.approx(4 * 256e3 / accum.train_step_ms.value)
    assert accum.throughput_samples_s > plain.throughput_samples_s
    assert accum.options["grad_accum"] == 4 and "grad_accum" not in plain.options
    assert "at batch 1024 (256 per pass)" in accum.summary() and "at batch 256 (" in plain.summary()
    assert any("grad_accum 4: no label of this GPU holds it" in n for n in accum.notes)
    dp = P.predict(SAMPLE_FILE, 64, device="a100", gpus=8, grad_accum=2)
    assert dp.distributed["global_batch"] == 8 * 64 * 2
    with pytest.raises(errors.UnsupportedOption, match="recompute is answered on GPUs"):
        P.predict(SAMPLE_FILE, 4, device="i9-10940x", recompute=True)
    with pytest.raises(errors.BadOption, match="grad_accum must be in"):
        P.predict(SAMPLE_FILE, 4, device="a100", grad_accum=0)


def test_a_moved_setting_keeps_the_step_models_ratio_at_the_batch_asked():
    """A setting no label holds is the labels' answer times the step model's ratio at the batch
    asked, with the predictor's own host figures and the GPU's kernel times scaled to the answer
    it moves, and is held at its own floor, not the one it moved from: on a GEMM-bound graph TF32
    reads above the AMP answer it moves from (at TF32's floor: the answer it moves from reads the
    H100 4x faster than the step model), and no optimizer below the SGD-momentum one."""
    deep = B.residual_chain(blocks=8, d=1024)
    g, spec = featurize(deep, batch_size=4096), devices.get("h100-sxm5-80gb")
    labels = {"precision": "amp-fp16", "optimizer": "sgd-momentum"}  # the reference's setting: not moved
    answer = P.predict(deep, 4096, device="h100", **labels).train_step_ms.value
    for asked in ({"precision": "tf32", "optimizer": "adamw"}, {"precision": "amp-fp16", "optimizer": "none"}):
        moved = R.settled(asked, R.load_predictor(None, "h100", None))[0]
        assert moved.base(asked) == labels
        host = step_host_us(moved.inner.manifest.launch)
        base = step_time(g, spec, labels, "train", host)
        scale = device_scale(base, answer)
        ratio = step_time(g, spec, asked, "train", host).with_device_scale(scale) / base.with_device_scale(scale)
        got = P.predict(deep, 4096, device="h100", **asked)
        assert got.train_step_ms.value == pytest.approx(max(answer * ratio, got.floors["train_step_ms"]), rel=1e-3)
        assert (got.train_step_ms.value > 1.3 * answer) if asked["precision"] == "tf32" else (ratio < 1)


@pytest.mark.parametrize("device", ["rtx3090", "h100-sxm5-80gb", "l4", "t4"])
def test_every_settings_answers_keep_physics_as_the_batch_grows(device):
    """Whatever composition answers (a shipped predictor, the spec-based one, a setting moved by
    the step model), training and inference throughput never fall as the batch grows, memory never shrinks, inference
    is never slower than the training step and power stays within the board's limit. A setting
    moved after the batch move runs on the device the answer reads (the batch move's scale on the
    kernel times): unscaled, its ratio took the host's share from another device, and ResNet-50's
    TF32 + Adam step on an H100 read 0.42 ms a sample at batch 64 and 0.50 at 128. Reserved memory
    taken at the allocated peak alone read convnext_atto's 577 MiB at batch 8 and 567.6 at 16."""
    settings = [{"precision": "amp-fp16", "optimizer": "sgd-momentum"}, {"precision": "fp32", "optimizer": "adamw"},
                {"precision": "tf32", "optimizer": "adam"}, {"precision": "amp-bf16", "optimizer": "adamw"}]
    for model in ("data/sample/onnx/densenet121@64.onnx", "data/sample/onnx/vit_xsmall_patch16_clip_224@64.onnx",
                  "data/sample/onnx/convnext_atto@64.onnx"):
        for asked in settings:
            if device == "t4" and asked["precision"] == "amp-bf16":
                continue  # no bf16 units: refused, tested elsewhere
            batches = (1, 4, 16, 64, 256, 512, 1024)
            answers = [P.predict(model, b, device=device, **asked) for b in batches]
            for small, large, b, a in zip(answers, answers[1:], batches[1:], batches):
                where = (model, device, asked, b)
                assert large.train_step_ms.value / b <= small.train_step_ms.value / a * 1.001, where
                assert large.inference_ms.value / b <= small.inference_ms.value / a * 1.001, where
                assert large.train_memory_mb.value >= small.train_memory_mb.value, where
            for a in answers:
                assert a.inference_ms.value <= a.train_step_ms.value * 1.001, (model, device, asked)
                assert a.power["train_power_w"] <= a.power["tdp_w"] * 1.001, (model, device, asked)


@pytest.mark.parametrize("parallel", ["dp", "zero1", "fsdp"])
def test_a_data_parallel_step_never_shortens_as_the_batch_grows(parallel):
    """The collectives hide behind each pass as it runs (a host-bound pass lasts its issue time):
    hidden behind the device time alone, ZeRO-3's exposed gathers shrank faster than a host-bound
    step grew, and the step read 3.26 ms at batch 1 and 3.16 at 128."""
    batches = [1, 4, 16, 64, 128, 256, 1024]
    answers = P.predict_each(SAMPLE_FILE, batches, ["h100"], gpus=8, parallel=parallel)
    steps = [a.train_step_ms.value for a in answers]
    assert all(later >= earlier * 0.999 for earlier, later in zip(steps, steps[1:])), steps
    assert all(a.distributed["parallel"] == parallel for a in answers)


def test_a_sweep_and_a_comparison_answer_as_one_call_does():
    """predict_each reads the request once: a global batch made up per batch, the layout kept."""
    one = P.predict(SAMPLE_FILE, 32, device="a100", gpus=8, global_batch=512, parallel="fsdp")
    both = P.predict_each(SAMPLE_FILE, [32], ["a100", "h100"], gpus=8, global_batch=512, parallel="fsdp")
    assert both[0].train_step_ms.value == pytest.approx(one.train_step_ms.value)
    assert both[0].distributed["global_batch"] == both[1].distributed["global_batch"] == 512
    assert both[0].distributed["parallel"] == "fsdp"
    swept = P.predict_each(SAMPLE_FILE, [32, 48, 64], ["a100"], gpus=8, global_batch=512)
    assert isinstance(swept[1], errors.BadOption) and swept[2].distributed["global_batch"] == 512


def test_a_global_batch_is_made_up_by_accumulation_in_every_interface():
    """The options every adapter builds (Python, HTTP fields, batch job) turn a global batch into
    gradient accumulation, or refuse one that does not divide or contradicts grad_accum."""
    assert P.PredictOptions(8, gpus=4, global_batch=64).grad_accum == 2
    assert parse_options({"batch_size": "8", "gpus": "4", "global_batch": "64"}, 4096).grad_accum == 2
    cluster = {"gpus_per_node": 4, "intra_node_gbs": 100, "inter_node_gbps": 200}  # a JSON body's object
    opts = parse_options({"batch_size": 8, "gpus": 8, "cluster": cluster}, 4096)
    p = P.predict_many([(open(SAMPLE_FILE, "rb").read(), replace(opts, device="a100"), "m")], P.load_predictor())[0]
    assert p.distributed["nodes"] == 2 and p.distributed["cluster"] == "custom"
    with pytest.raises(errors.BadOption, match="disagree"):
        P.PredictOptions(8, gpus=4, global_batch=64, grad_accum=3)
    with pytest.raises(ApiError, match="no multiple of batch_size x gpus = 32"):
        parse_options({"batch_size": "8", "gpus": "4", "global_batch": "48"}, 4096)


def test_a_spec_based_answer_orders_optimizers_by_the_work_they_do():
    # the H100's spec model holds optimizer none itself, its reference (the RTX 3090's labels)
    # SGD with momentum: none is moved from the reference's answer like the others, not answered
    # on another level
    for precision in ("amp-fp16", "amp-bf16"):  # amp-bf16: moved from amp-fp16 first
        times = {o: P.predict(SAMPLE_FILE, 64, device="h100-sxm5-80gb", precision=precision,
                              optimizer=o).train_step_ms.value for o in ("none", "sgd", "sgd-momentum", "adam", "adamw")}
        assert times["none"] <= times["sgd"] <= times["sgd-momentum"] <= times["adam"] <= times["adamw"], precision
    moved = P.predict(SAMPLE_FILE, 64, device="h100-sxm5-80gb", optimizer="none")
    assert any("optimizer none: its reference predictor's labels do not hold it" in n for n in moved.notes)


def test_a_pure_half_precision_step_is_never_slower_than_amp_in_it():
    """Pure fp16 / bf16 does AMP's work without its casts and fp32 master weights. The H100's
    spec model holds fp16 from rows on older GPUs (its answer for ResNet-50 at batch 64 read 13%
    above the reference's AMP answer): a 16-bit precision the reference does not hold moves from
    its AMP."""
    for model in (SAMPLE_FILE, "data/sample/onnx/densenet121@64.onnx"):
        for half, amp in (("fp16", "amp-fp16"), ("bf16", "amp-bf16")):
            pure, mixed = (P.predict(model, 64, device="h100-sxm5-80gb", precision=p, optimizer="adamw") for p in (half, amp))
            assert pure.train_step_ms.value <= mixed.train_step_ms.value, (model, half)
            assert pure.inference_ms.value <= mixed.inference_ms.value * 1.001, (model, half)
    moved = P.predict(SAMPLE_FILE, 64, device="h100-sxm5-80gb", precision="fp16")
    assert any("precision fp16: its reference predictor's labels do not hold it" in n for n in moved.notes)


def test_a_tf32_step_rests_on_the_reference_amp_answer():
    """TF32 is AMP's tensor-core work at half the rate with fp32 activations: on an H100 it moves
    from the reference's AMP answer (the spec model's own TF32 answer, moved from fp32, read the
    H200 campaign's ViT-B TF32 steps 1.2x AMP where they measured 2x), so where the device sets
    the step it is never below AMP, and never above true fp32."""
    # at batch 2048: up to 1024 the host's issue of its ~430 kernels sets the AMP step (43 ms)
    runs = {p: P.predict("data/sample/onnx/densenet121@64.onnx", 2048, device="h100-sxm5-80gb", precision=p,
                         optimizer="adamw") for p in ("amp-bf16", "tf32", "fp32")}
    assert runs["amp-bf16"].train_step_ms.value < runs["tf32"].train_step_ms.value < runs["fp32"].train_step_ms.value
    assert any("precision tf32, optimizer adamw: its reference predictor's labels do not hold it; the answer in "
               "precision amp-fp16" in n for n in runs["tf32"].notes)
    # where the AMP answer and the fp32 one disagree in level (on an L4, moved from AMP, TF32 read
    # convnext_atto 1.6x and poolformerv2_s12 1.5x their fp32 step), TF32 is held at fp32's answer
    held = 0
    for name in ("convnext_atto", "poolformerv2_s12", "densenet121", "resnet10t"):
        tf32, fp32 = (P.predict(f"data/sample/onnx/{name}@64.onnx", 256, device="l4", precision=p, optimizer="adamw")
                      for p in ("tf32", "fp32"))
        assert tf32.train_step_ms.value <= fp32.train_step_ms.value * (1 + 1e-6), name
        if any("held at this model's answer in precision fp32" in n for n in tf32.notes):
            held += 1
            assert tf32.train_step_ms.value == pytest.approx(fp32.train_step_ms.value, rel=1e-6)
    assert held


def test_a_tf32_row_is_held_at_the_fp32_rows_times_only_where_it_reads_slower():
    row = {"train_step_ms": 30.0, "train_step_ms_low": 20.0, "train_step_ms_high": 60.0, "train_step_ms_std": 3.0,
           "inference_ms": 5.0, "train_memory_mb": 900.0}
    notes = held_at(row, {"train_step_ms": 15.0, "inference_ms": 8.0, "train_memory_mb": 100.0}, {"precision": "tf32"})
    assert row == {"train_step_ms": 15.0, "train_step_ms_low": 10.0, "train_step_ms_high": 30.0, "train_step_ms_std": 1.5,
                   "inference_ms": 5.0, "train_memory_mb": 900.0}
    assert notes and notes[0].startswith("train_step_ms: held at this model's answer in precision fp32")
    assert held_at(row, {"train_step_ms": 40.0}, {"precision": "tf32"}) == []


@pytest.mark.parametrize("device", ["t4", "v100", "mi250"])
def test_tf32_on_a_gpu_without_tf32_units_is_its_fp32_answer(device):
    """PyTorch's allow_tf32 changes nothing on a GPU without TF32 tensor cores: the step is fp32's.
    Answered by another route (the AMP reference moved by the step model) a T4's ViT-B/16 read a
    TF32 step 15% shorter than its fp32 one, a V100's 2% and an MI250's 1.9x longer."""
    model = "data/sample/onnx/vit_xsmall_patch16_clip_224@64.onnx"
    tf32, fp32 = (P.predict(model, 32, device=device, precision=p, optimizer="adamw") for p in ("tf32", "fp32"))
    for t in ("train_step_ms", "inference_ms", "train_memory_mb"):
        assert getattr(tf32, t).value == getattr(fp32, t).value, t
    assert tf32.options["precision"] == "fp32"
    assert any("has no TF32 tensor cores, so PyTorch runs the step in fp32" in n for n in tf32.notes)
    h100 = P.predict(model, 32, device="h100", precision="tf32", optimizer="adamw")
    assert h100.options["precision"] == "tf32" and not any("no TF32 tensor cores" in n for n in h100.notes)
    # fp32 where TF32 units exist: the answer says which math it is (the campaign measured both)
    fp32_notes = P.predict(model, 32, device="h100", precision="fp32", optimizer="adamw").notes
    assert any("PyTorch's default math" in n and "convolutions in TF32" in n for n in fp32_notes)
    assert not any("PyTorch's default math" in n for n in fp32.notes)  # no TF32 units: nothing to say


def test_a_gpu_step_without_an_optimizer_is_never_slower_than_with_sgd():
    """On an A100 in fp32 the spec-based model answers a step without an optimizer from its own
    rows (NeuSight's and ryujaehun's fp32 runs have none) and one with SGD from its SGD-momentum
    answer moved by the step model: the two derivations read ConvNeXt-T's step 0.4% apart the
    wrong way round, and the one without is held at SGD's."""
    runs = {o: P.predict("convnext_tiny", 32, device="a100", resolution=224, precision="fp32", optimizer=o)
            for o in ("none", "sgd", "sgd-momentum", "adamw")}
    times = [runs[o].train_step_ms.value for o in ("none", "sgd", "sgd-momentum", "adamw")]
    assert times == sorted(times)
    assert runs["none"].train_step_ms.value == pytest.approx(runs["sgd"].train_step_ms.value, rel=1e-9)
    assert any("held at this model's answer in optimizer sgd" in n for n in runs["none"].notes)
    assert not any("held at" in n and "optimizer" in n for o in ("sgd", "adamw") for n in runs[o].notes)


def test_a_users_gpu_spec_answers_power_and_a_limit_in_every_setting():
    # fp32 + Adam is moved from the spec model's setting by the step model: the move carries the
    # user's spec, so its TDP bounds the power and a limit applies
    for setting in ({}, {"precision": "fp32", "optimizer": "adam"}):
        free = P.predict(SAMPLE_FILE, 32, device_spec="data/sample/my_gpu.json", **setting)
        capped = P.predict(SAMPLE_FILE, 32, device_spec="data/sample/my_gpu.json", power_limit_w=25, **setting)
        assert free.train_power_w is not None and free.power["tdp_w"] == 72.0
        assert capped.train_power_w.value <= 25 + 1e-6 < free.train_power_w.value
        assert capped.train_step_ms.value >= free.train_step_ms.value
