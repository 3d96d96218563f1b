"""Which predictor answers a device: shipped, spec-based for spec-table GPUs and user specs."""
import json

import pytest

import onnx_builders as B
from spec_builders import train_tiny
from trappm_ray import devices, errors
from trappm_ray.model.estimator import PredictorError
from trappm_ray.model.manifest import NETWORK, Device, Manifest
from trappm_ray.model.network_predictor import NetworkPredictor
from trappm_ray.model.launch import step_host_us
from trappm_ray.model.spec_model import SpecPredictor
from trappm_ray.physics.roofline import roofline
from trappm_ray.physics.step_model import device_scale, step_time
from trappm_ray.graph.onnx_io import read_model
from trappm_ray.serving import api as P
from trappm_ray.serving.model_input import featurize_with
from trappm_ray.serving import routing as R


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("spec") / "gpu-spec"
    train_tiny(str(out))
    return out


@pytest.fixture
def tiny(tiny_dir, monkeypatch):
    """The registry's spec-based predictor is the tiny one (shipped per-device ones stay)."""
    monkeypatch.setattr(R, "SPEC_DIR", tiny_dir)
    monkeypatch.setattr(R, "_LOADED", {})
    return tiny_dir


@pytest.fixture
def gpu_json(tmp_path):
    f = tmp_path / "my_gpu.json"
    f.write_text(json.dumps({"name": "My GPU", "memory_gb": 48, "memory_bw_gbs": 900,
                             "peak_fp32_tflops": 40, "peak_fp16_tensor_tflops": 160}))
    return f


def test_devices_resolve_to_shipped_then_spec(tiny, gpu_json):
    assert isinstance(R.load_predictor(None, "rtx3090"), NetworkPredictor)  # shipped rtx3090-amp
    spec = R.load_predictor(None, "a100-sxm4-80gb")
    assert isinstance(spec, SpecPredictor) and spec.spec.slug == "a100-sxm4-80gb"
    assert R.load_predictor(None, "A100-SXM4-80GB") is spec  # any spelling, cached
    user = R.load_predictor(None, device_spec=str(gpu_json))
    assert user.manifest.device.spec_source == "json" and user.spec.memory_bw_gbs == 900
    assert R.load_predictor(str(tiny), "t4").spec.slug == "t4"  # a gpu-spec directory by URI


def test_refusals_say_how_to_pass_a_spec(tiny, gpu_json):
    with pytest.raises(PredictorError, match="unknown device 'my-tpu'.*--device-spec FILE.json"):
        R.load_predictor(None, "my-tpu")
    with pytest.raises(PredictorError, match="CPU"):  # a CPU of the table without a shipped predictor
        R.load_predictor(None, "intel-r-xeon-r-processor-t2")
    assert R.load_predictor(None, "i9-10940x").manifest.device.kind == "cpu"  # shipped
    with pytest.raises(PredictorError, match="not both"):
        R.load_predictor(None, "t4", device_spec=str(gpu_json))
    with pytest.raises(PredictorError, match="name a device"):
        R.load_predictor(str(tiny))


def test_catalog_lists_shipped_and_spec_devices(tiny):
    by = {d["device"]: d for d in R.device_catalog()}
    assert by["rtx3090-amp"]["predictor"] == "rtx3090-amp" and "rtx3090" not in by
    assert by["h100-sxm5-80gb"]["predictor"] == "gpu-spec" and by["h100-sxm5-80gb"]["spec_only"]
    assert not by["t4"]["spec_only"]  # the tiny model has t4 rows
    assert "i9-10940x" not in by


def test_predict_with_spec_device_and_json(tiny, gpu_json):
    p = P.predict(B.cnn_model(), batch_size=8, device="h100-sxm5-80gb")
    assert p.device["slug"] == "h100-sxm5-80gb" and p.options["precision"] == "amp-fp16"
    for t in ("train_step_ms", "inference_ms"):
        e = getattr(p, t)
        assert e.value >= p.floors[t] > 0 and e.low >= p.floors[t] and e.low <= e.value <= e.high
    assert p.memory_terms is not None and p.train_memory_mb.value > 0  # the CUDA memory model
    assert any("device specs alone" in n and "leave-one-device-out" in n for n in p.notes)
    fp32 = P.predict(B.cnn_model(), batch_size=8, device="h100-sxm5-80gb", precision="fp32")
    # the floor is the roofline's or, for a graph this small, the host's time to issue its kernels
    assert fp32.options["precision"] == "fp32" and fp32.floors["train_step_ms"] >= p.floors["train_step_ms"]
    user = P.predict(B.cnn_model(), batch_size=8, device_spec=gpu_json)
    assert user.device["spec_source"] == "json" and user.to_dict()["notes"]
    adam = P.predict(B.cnn_model(), batch_size=8, device="h100-sxm5-80gb", optimizer="adamw")
    assert adam.options["optimizer"] == "adamw" and adam.train_step_ms.value >= p.train_step_ms.value
    assert any("step model's ratio" in n for n in adam.notes)
    assert P.predict(B.cnn_model(), device="h100-sxm5-80gb", gpus=8).distributed["gpus"] == 8  # data parallel
    with pytest.raises(errors.UnsupportedOption, match="gpus"):  # a CPU predictor: one "GPU" only
        P.predict(B.cnn_model(), device="i9-10940x", gpus=8)


def test_predict_many_routes_items_by_device(tiny):
    data = B.to_bytes(B.cnn_model())
    items = [(data, P.PredictOptions(2, device="t4"), "a"), (data, P.PredictOptions(2, device="nope"), "b"),
             (data, P.PredictOptions(2, device="h100-sxm5-80gb"), "c")]
    a, b, c = P.predict_many(items, R.load_predictor(None, "t4"))
    assert a.device["slug"] == "t4" and c.device["slug"] == "h100-sxm5-80gb"
    assert isinstance(b, errors.UnsupportedOption) and "--device-spec" in str(b)


def test_batch_actor_predicts_for_a_device(tiny, tmp_path):
    """The batch job's ``--device`` (its actor, called without Ray): spec-based rows."""
    import pyarrow as pa

    from trappm_ray.serving.batch import BatchPredictConfig, PredictActor

    f = tmp_path / "cnn.onnx"
    f.write_bytes(B.to_bytes(B.cnn_model()))
    cfg = BatchPredictConfig(src=str(tmp_path), dst=str(tmp_path / "out"), device="h100-sxm5-80gb")
    actor = PredictActor("default", 4, None, 2**20, cfg.setting())
    row = actor(pa.table({"path": [str(f)]})).to_pylist()[0]
    assert row["status"] == "ok" and row["device"] == "h100-sxm5-80gb"
    assert row["model_version"].startswith("gpu-spec:h100-sxm5-80gb")
    assert row["train_step_ms_low"] <= row["train_step_ms"] <= row["train_step_ms_high"]
    assert row["train_memory_mb"] > 0


def test_gpus_without_labels_take_the_reference_transfer():
    """The shipped predictors: an H100 step is the RTX 3090 predictor's x the floor ratio (or the
    launch time), so a GPU faster in every spec is never predicted slower; the RTX 4090's
    shipped (inference-only) predictor takes its step time from the spec-based predictor, which
    transfers it from the RTX 3090's."""
    import math

    from trappm_ray.model.device_features import KERNELS_COL, roofline_features, settings
    from trappm_ray.model.floor_ratio import transfer_ms

    R._LOADED.clear()
    ref, h100, rtx4090 = (R.load_predictor(None, d) for d in ("rtx3090", "h100-sxm5-80gb", "rtx4090"))
    assert h100.reference is ref and h100.manifest.device.reference == "rtx3090-amp"
    assert rtx4090.shipped.targets == ("inference_ms",) and rtx4090.filled == ("train_step_ms",)
    assert rtx4090.spec_predictor.moved == ("train_step_ms",) and rtx4090.spec_predictor.reference is ref
    graph = featurize_with(B.cnn_model(hw=32), P.PredictOptions(batch_size=64), 64)
    s = {"precision": "amp-fp16", "optimizer": "sgd-momentum", "memory_format": "nchw", "interval_z": 1.96}
    on_ref = ref.predict_graphs([graph])[0]
    got = h100.predict_graphs([graph], [s])[0]
    for target, mode in (("train_step_ms", "train"), ("inference_ms", "infer")):
        run = settings(mode == "train", "amp-fp16")
        opt = "sgd-momentum" if mode == "train" else "none"
        here = roofline_features(graph, devices.get("h100-sxm5-80gb"), "amp-fp16", mode, opt, run)
        there = roofline_features(graph, devices.get("rtx3090"), "amp-fp16", mode, opt, run)
        want = transfer_ms(on_ref[target], here[0], there[0], math.exp(here[1][KERNELS_COL]), mode)
        assert got[target] == pytest.approx(want)
        assert got[target] <= max(on_ref[target], here[0])
    fp32 = h100.predict_graphs([graph], [{**s, "precision": "fp32"}])[0]  # no reference: spec model
    assert fp32["train_step_ms"] > 0


def test_a_graph_the_reference_measured_moves_that_measurement():
    """Reference transfer with anchors: the measured / floor ratio of the same graph at a batch
    within 2x replaces the reference predictor's answer, for that target and setting only."""
    import math

    from trappm_ray.model.anchors import MeasuredAnchors, fingerprint
    from trappm_ray.model.device_features import KERNELS_COL, roofline_features, settings
    from trappm_ray.model.floor_ratio import transfer_ms

    R._LOADED.clear()
    ref = R.load_predictor(None, "rtx3090")
    graph = featurize_with(B.cnn_model(hw=32), P.PredictOptions(batch_size=64), 64)
    anchors = MeasuredAnchors([{"fingerprint": fingerprint(graph), "resolution": int(graph.static["resolution"]),
                                "batch_size": 128, "target": "inference_ms", "precision": "amp-fp16",
                                "memory_format": "nchw", "optimizer": "none", "measured_ms": 1.0, "ratio": 7.0,
                                "arch": "tiny"}], "rtx3090-amp")
    spec = devices.get("h100-sxm5-80gb")
    h100 = SpecPredictor(R.spec_model(), spec, reference=ref, anchors=anchors)
    assert "rtx3090-amp labels measured" in h100.manifest.device.note
    s = {"precision": "amp-fp16", "optimizer": "sgd-momentum", "memory_format": "nchw", "interval_z": 1.96}
    got = h100.predict_graphs([graph], [s])[0]
    plain = SpecPredictor(R.spec_model(), spec, reference=ref).predict_graphs([graph], [s])[0]
    here = roofline_features(graph, spec, "amp-fp16", "infer", "none", settings(False, "amp-fp16"))
    there = roofline_features(graph, devices.get("rtx3090"), "amp-fp16", "infer", "none", settings(False, "amp-fp16"))
    want = transfer_ms(7.0 * there[0], here[0], there[0], math.exp(here[1][KERNELS_COL]), "infer")
    assert got["inference_ms"] == pytest.approx(want) and got["inference_ms_measured_batch"] == 128
    assert got["train_step_ms"] == pytest.approx(plain["train_step_ms"]) and "train_step_ms_measured_batch" not in got
    nhwc = h100.predict_graphs([graph], [{**s, "memory_format": "nhwc"}])[0]
    assert "inference_ms_measured_batch" not in nhwc


def test_a_transferred_step_below_the_reference_labels_is_moved_as_the_reference_moves_its_own():
    """resnet10t at 64 px on a user's L4: below the RTX 3090's labeled batches its raw answer is
    an extrapolation the RTX 3090's own answers never give (they are moved from the batch its
    labels measure by the step model); the transfer is moved too, so it never exceeds the RTX
    3090's answer x the floor ratio (before: 25.1 ms at batch 64 against 7.1 x 2.4)."""
    R._LOADED.clear()
    path, l4_spec = "data/sample/onnx/resnet10t@64.onnx", devices.from_json("data/sample/my_gpu.json")
    for b in (1, 64):
        ref = P.predict(path, batch_size=b, device="rtx3090")
        l4 = P.predict(path, batch_size=b, device_spec="data/sample/my_gpu.json")
        graph = featurize_with(read_model(open(path, "rb").read()), P.PredictOptions(b), b)
        for t, mode in (("train_step_ms", "train"), ("inference_ms", "infer")):
            ratio = (roofline(graph, l4_spec, "amp-fp16", mode, "sgd-momentum").total_ms
                     / roofline(graph, devices.get("rtx3090"), "amp-fp16", mode, "sgd-momentum").total_ms)
            assert getattr(l4, t).value <= getattr(ref, t).value * ratio, (b, t)
            assert any(n.startswith(f"{t}: the step model at batch {b}") for n in l4.notes), (b, t)


def test_an_option_the_shipped_gpu_predictor_lacks_is_moved_by_the_step_model(tmp_path):
    """RTX 3090 in fp32 or pure fp16: the shipped (AMP-only) answer x the step model's ratio
    between the settings on the RTX 3090, not the spec model's (its rows hold fp32 and fp16 on
    other GPUs only: its ratio read ResNet-50 slower in pure fp16 than in AMP); channels-last is
    the shipped predictor's own (its labels vary it); an option none has is still refused."""
    R._LOADED.clear()
    path = tmp_path / "cnn.onnx"
    path.write_bytes(B.to_bytes(B.cnn_model(hw=32)))
    amp = P.predict(str(path), batch_size=64, device="rtx3090")
    nhwc = P.predict(str(path), batch_size=64, device="rtx3090", memory_format="nhwc")
    moved_note = "precision fp32: no label of this GPU holds it; the answer in precision amp-fp16 x the step model's ratio"
    assert nhwc.options["memory_format"] == "nhwc" and nhwc.model_version == amp.model_version
    assert "step model's ratio" not in " ".join(nhwc.notes)
    fp32, fp16 = (P.predict(str(path), batch_size=64, device="rtx3090", precision=p) for p in ("fp32", "fp16"))
    assert amp.options["precision"] == "amp-fp16" and fp32.options["precision"] == "fp32"
    assert moved_note in " ".join(fp32.notes) and "spec-based predictor's ratio" not in " ".join(fp32.notes)
    # pure fp16 is AMP without its casts (this net is host-bound: fewer kernels, less time, as fp32 is too)
    assert fp16.train_step_ms.value <= amp.train_step_ms.value
    for t in ("train_step_ms", "inference_ms"):
        assert getattr(fp32, t).low <= getattr(fp32, t).value <= getattr(fp32, t).high
    # the raw rows (before the API's batch rules): the shipped answer x the step model's ratio,
    # its kernel times at the scale that makes it read the shipped answer
    spec, shipped = devices.get("rtx3090"), P.load_predictor(None, "rtx3090", None)
    both, setting = R.settled({"precision": "fp32"}, shipped)
    graph = featurize_with(B.cnn_model(hw=32), P.PredictOptions(batch_size=64), 64)
    moved = both.predict_graphs([graph], [setting])[0]
    own = shipped.predict_graphs([graph], [{**setting, "precision": "amp-fp16"}])[0]
    host = step_host_us(shipped.manifest.launch)
    for t, mode in (("train_step_ms", "train"), ("inference_ms", "infer")):
        base = step_time(graph, spec, {**setting, "precision": "amp-fp16"}, mode, host)
        scale = device_scale(base, own[t])
        ratio = step_time(graph, spec, setting, mode, host).with_device_scale(scale) / base.with_device_scale(scale)
        assert moved[t] / own[t] == pytest.approx(ratio, rel=1e-6)
    # an optimizer no label of the RTX 3090 holds: moved from SGD by the step model, never cheaper
    adamw = P.predict(str(path), batch_size=64, device="rtx3090", optimizer="adamw")
    assert adamw.options["optimizer"] == "adamw" and adamw.train_step_ms.value >= amp.train_step_ms.value
    assert adamw.inference_ms.value == pytest.approx(amp.inference_ms.value)
    with pytest.raises(errors.UnsupportedOption, match="bf16 units"):
        P.predict(str(path), batch_size=64, device="v100-pcie-32gb", precision="amp-bf16")


class _Stub:
    """A predictor answering ``value`` for its ``targets`` (unit test of TargetFill only)."""

    def __init__(self, targets, value, name):
        self.targets, self.value = tuple(targets), value
        self.manifest = Manifest(name=name, kind=NETWORK, feature_set="v2", targets=self.targets,
                                 device=Device("gpu-x", kind="cuda", note="from its specs"),
                                 options={"precision": ["amp-fp16"]})

    def predict_graphs(self, graphs, settings_list):
        return [{k: v for t in self.targets for k, v in
                 ((t, self.value), (f"{t}_std", 0.1), (f"{t}_low", 0.9 * self.value),
                  (f"{t}_high", 1.1 * self.value))} for _ in graphs]

    def check(self, setting):
        if setting.get("precision") == "fp64":
            raise errors.UnsupportedOption("no fp64 roofline")


def test_target_fill_completes_a_shipped_predictor_with_the_spec_answer():
    from trappm_ray.model.compositions import TargetFill

    both = TargetFill(_Stub(["inference_ms"], 2.0, "gpu-x"), _Stub(["train_step_ms", "inference_ms"], 5.0, "gpu-spec"))
    assert both.targets == ("inference_ms", "train_step_ms") and both.manifest.targets == both.targets
    row = both.predict_graphs([object(), object()], [{}, {}])[1]
    assert row["inference_ms"] == 2.0 and row["inference_ms_high"] == 2.2
    assert row["train_step_ms"] == 5.0 and row["train_step_ms_low"] == 4.5
    assert both.manifest.device.note.startswith("train_step_ms: no labels of this device; from its specs")
    assert both.manifest.name == "gpu-x+gpu-spec" and both.manifest.options == {"precision": ["amp-fp16"]}
    with pytest.raises(errors.UnsupportedOption):
        both.check({"precision": "fp64"})


def test_rtx4090_answers_inference_from_its_gnn_and_the_step_from_the_spec_predictor():
    R._LOADED.clear()
    p = P.predict(B.cnn_model(hw=32), 256, device="rtx4090")
    assert p.train_step_ms is not None and p.inference_ms is not None and p.train_memory_mb is not None
    assert p.model_version.startswith("rtx4090-amp")
    assert any(n.startswith("train_step_ms: no labels of this device") for n in p.notes)
    graph = featurize_with(B.cnn_model(hw=32), P.PredictOptions(batch_size=256), 256)
    both = R.load_predictor(None, "rtx4090")
    own = both.shipped.predict_graphs([graph])[0]["inference_ms"]
    assert both.predict_graphs([graph], [{}])[0]["inference_ms"] == pytest.approx(own)
    # 5 kernels: the GNN's own answer at batch 256 is below what the host takes to issue them;
    # the API's is the step model's, host-bound, within the learned answer at the anchor
    assert p.inference_ms.value >= p.floors["inference_ms"] > own
    assert any(n.startswith("inference_ms: the step model at batch 256") for n in p.notes)


def test_a_cpu_predictor_is_not_completed_by_the_gpu_spec_predictor():
    R._LOADED.clear()
    cpu = _Stub(["inference_ms"], 2.0, "i9")
    cpu.manifest = cpu.manifest.replace(device=Device.from_dict({"slug": "i9-10940x-fp32", "kind": "cpu", "spec": "i9-10940x"}))
    assert R.completed(cpu) is cpu  # the spec-based predictor refuses CPUs: nothing to add
    spec_m = cpu.manifest.replace(targets=("train_step_ms", "inference_ms"))
    assert R.filled_by_spec(cpu.manifest, spec_m) == []


def test_a_text_model_on_a_predictor_of_image_models_goes_to_the_spec_model():
    """The RTX 3090 / 4090 predictors' labels are timm's (image models only); a text model is
    answered by the spec-based predictor of the device, whose rows include transformer LMs, and
    the RTX 4090's training step is not transferred from the RTX 3090's image predictor."""
    from trappm_ray.model.floor_ratio import image_only
    R._LOADED.clear()
    rtx3090 = P.load_predictor(None, "rtx3090", None)
    assert image_only(rtx3090.manifest) and not image_only(R.spec_predictor("rtx3090").manifest)
    m = rtx3090.manifest
    assert not image_only(m.replace(data={})) and not image_only(m.replace(data={"model_sources": ["timm", "transformers"]}))
    alt, setting, note = R.for_text(rtx3090, {})
    assert alt is R.spec_predictor("rtx3090") and setting["precision"] == "amp-fp16" and "text model" in note
    assert R.for_text(alt, {}) is None and R.for_text(P.load_predictor(None, None, None), {}) is None
    text = P.predict(B.text_model(), 8, device="rtx3090", dims={"seq": 128})
    assert text.model_version.startswith("gpu-spec:rtx3090") and any("text model" in n for n in text.notes)
    image = P.predict(B.cnn_model(hw=32), 8, device="rtx3090")
    assert image.model_version.startswith("rtx3090-amp") and not any("text model" in n for n in image.notes)
    # the settings transformers train in are composed as for any model (they were refused: "the
    # rtx3090 predictor was trained on optimizer sgd-momentum, none, not 'adamw'")
    times = {}
    for asked in ({"optimizer": "sgd-momentum"}, {"optimizer": "adamw"}, {"precision": "amp-bf16", "optimizer": "adamw"}):
        moved = P.predict(B.text_model(), 8, device="rtx3090", dims={"seq": 128}, **asked)
        assert any("text model: the rtx3090-amp predictor's labels" in n for n in moved.notes), asked
        times[tuple(asked.values())] = moved.train_step_ms.value
    assert times[("adamw",)] >= times[("sgd-momentum",)]
    rtx4090 = R.spec_predictor("rtx4090")
    assert rtx4090.reference is not None and "train_step_ms" in rtx4090.moved
    graph = featurize_with(B.text_model(), P.PredictOptions(8, dims=(("seq", 128),)), 8)
    own = R.SpecPredictor(rtx4090.model, rtx4090.spec)  # no reference
    answered, alone = (p.predict_graphs([graph])[0]["train_step_ms"] for p in (rtx4090, own))
    assert answered == pytest.approx(alone)


def test_a_model_the_rtx3090_measured_is_answered_from_that_measurement_on_a_gpu_without_labels(tmp_path):
    """The shipped RTX 3090 predictor carries its measurements: resnet10t at 176 px, batch 512,
    is one of them, so on an H100 the step is that measurement's ratio to its floor times the
    H100's floor; 16x below it, the step model moves that answer from the anchor batch."""
    from trappm_ray.corpus.zoo import export_skeleton
    from trappm_ray.model.anchors import MeasuredAnchors

    R._LOADED.clear()
    anchors = MeasuredAnchors.load(R.reference_path(devices.get("h100-sxm5-80gb")))
    path = tmp_path / "resnet10t@176.onnx"
    path.write_bytes(export_skeleton("resnet10t", 176).onnx_bytes)
    graph = featurize_with(read_model(path.read_bytes()), P.PredictOptions(batch_size=512))
    setting = {"precision": "amp-fp16", "memory_format": "nchw", "optimizer": "sgd-momentum"}
    measured = anchors.lookup(graph, "train_step_ms", setting)
    assert measured["arch"] == "resnet10t" and measured["batch_size"] == 512
    got = P.predict(str(path), batch_size=512, device="h100-sxm5-80gb")
    assert got.train_step_ms.value == pytest.approx(measured["ratio"] * got.floors["train_step_ms"], rel=1e-6)
    assert any("measured on rtx3090-amp at batch 512" in n for n in got.notes)
    far = P.predict(str(path), batch_size=32, device="h100-sxm5-80gb")
    assert any("measured on rtx3090-amp at batch 512" in n and "answers at batch 512, the step model from there"
               in n for n in far.notes)
    assert far.train_step_ms.value < got.train_step_ms.value
