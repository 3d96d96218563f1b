"""Transformers models by config: a config.json, a folder, a Hugging Face id in the local cache."""
from __future__ import annotations

import json

import pytest

from trappm_ray import errors
from trappm_ray.graph.featurize import featurize
from trappm_ray.serving import model_input as M

TINY_GPT2 = {"n_embd": 64, "n_layer": 1, "n_head": 4, "vocab_size": 1000, "n_positions": 128}


def _params(config: dict) -> int:
    import transformers

    full = {"model_type": "gpt2", **config}
    return sum(p.numel() for p in transformers.GPT2LMHeadModel(transformers.AutoConfig.for_model(**full)).parameters())


def test_a_config_file_or_folder_is_a_model_with_tied_weights_counted_once(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_GPT2))  # no model_type: GPT-2 keys say it
    for given in (tmp_path / "config.json", tmp_path):
        data, label = M.model_bytes(str(given))
        g = featurize(data, 2, dims={"seq": 16})
        assert g.static["params"] == _params(TINY_GPT2) and label == str(given)


def test_a_hub_id_reads_the_local_cache_only(tmp_path, monkeypatch):
    snap = tmp_path / "models--org--tiny" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"model_type": "gpt2", **TINY_GPT2}))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    data, label = M.model_bytes("org/tiny")
    assert label == "org/tiny" and featurize(data, 1, dims={"seq": 8}).static["params"] == _params(TINY_GPT2)
    with pytest.raises(errors.NotAModel, match="local cache .*pass the config.json"):
        M.model_bytes("org/absent-model")


def test_a_config_transformers_cannot_read_is_one_clear_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden": 3}))
    with pytest.raises(errors.NotAModel, match="needs a model_type"):
        M.model_bytes(str(tmp_path / "config.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(errors.NotAModel, match="not JSON"):
        M.model_bytes(str(tmp_path / "bad.json"))


def test_a_large_file_is_read_without_its_weights(tmp_path):
    import onnx_builders as B

    path = tmp_path / "big.onnx"
    path.write_bytes(B.to_bytes(B.gemm_model(k=1024, n=1024)))  # 4 MB of weights
    data, label = M.model_bytes(str(path))
    assert len(data) < 100_000 and label == str(path)
    assert featurize(data, 2).static["params"] == featurize(path.read_bytes(), 2).static["params"]


def test_a_timm_name_is_exported_once_then_read_from_the_cache(tmp_path, monkeypatch):
    from trappm_ray.corpus import zoo

    monkeypatch.setenv("TRAPPM_CACHE", str(tmp_path))
    first, label = M.model_bytes("resnet10t", resolution=32)
    assert label == "resnet10t" and (M.export_cache() / "resnet10t@32.onnx").read_bytes() == first

    def no_export(*a, **k):
        raise AssertionError("exported again")

    monkeypatch.setattr(zoo, "export_skeleton", no_export)
    assert M.model_bytes("resnet10t", resolution=32)[0] == first


def test_a_timm_name_without_a_size_is_exported_at_its_own(tmp_path, monkeypatch):
    pytest.importorskip("timm")
    from trappm_ray.corpus import zoo

    assert zoo.own_resolution("crossvit_9_240") == 240 and zoo.own_resolution("efficientnet_b3") == 288
    monkeypatch.setenv("TRAPPM_CACHE", str(tmp_path))
    asked = []

    class Exported:
        onnx_bytes = b"onnx"

    def export(arch, resolution, **kw):
        asked.append((arch, resolution))
        return Exported()

    monkeypatch.setattr(zoo, "export_skeleton", export)
    assert M.model_bytes("crossvit_9_240")[0] == b"onnx" and asked == [("crossvit_9_240", 240)]
    assert (M.export_cache() / "crossvit_9_240@own.onnx").is_file()
    M.model_bytes("crossvit_9_240", resolution=224)
    assert asked[-1] == ("crossvit_9_240", 224)


def test_timm_names_are_read_from_its_sources_with_their_deprecated_aliases():
    timm = pytest.importorskip("timm")
    from trappm_ray.serving.model_input import check_timm_name, timm_names

    names = timm_names()
    assert set(timm.list_models()) <= names and "vit_base_patch16_224_in21k" in names  # an old, accepted name
    check_timm_name("resnet50.a1_in1k")  # a pretrained tag after the name
    with pytest.raises(errors.NotAModel, match=r"did you mean resnet50"):
        check_timm_name("resnet5000")
