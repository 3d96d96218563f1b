"""One export of each model source the corpus builds (slow: real torch exports)."""
import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from trappm_ray.corpus import sources, text_models, torchvision_models, zoo
from trappm_ray.corpus.build import build_shard
from trappm_ray.graph.featurize import featurize

pytestmark = pytest.mark.slow


def _same(a, b):
    return (a.ops == b.ops and a.edge_index.tolist() == b.edge_index.tolist()
            and a.out_shape.tolist() == b.out_shape.tolist() and a.static == b.static)


def test_timm_meta_init_gives_the_real_export_graph(monkeypatch):
    real = zoo.export_skeleton("resnet18", 64, meta_init=False).onnx_bytes
    meta = zoo.export_skeleton("resnet18", 64, meta_init=True).onnx_bytes
    monkeypatch.setattr(zoo, "LEAN_ABOVE_PARAMS", 0)  # broadcast weights, no weight values
    lean = zoo.export_skeleton("resnet18", 64, meta_init=True).onnx_bytes
    ref = featurize(real, batch_size=8, resolution=64)
    assert _same(featurize(meta, batch_size=8, resolution=64), ref)
    assert _same(featurize(lean, batch_size=8, resolution=64), ref)


@pytest.mark.parametrize("name", ["hf_bert_base", "hf_gpt2", "hf_t5_small_encoder", "hf_llama_decoder"])
def test_text_model_exports_with_dynamic_batch_and_seq(name, tmp_path):
    onnx_bytes, params = text_models.export_text_model(name)
    assert params > 30_000_000
    g = featurize(onnx_bytes, batch_size=3, dims={"seq": 40})
    assert g.static["batch_size"] == 3
    assert max(int(s[1]) for s in g.out_shape if s[0] == 3) >= 40  # [batch, seq, ...] outputs
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(onnx_bytes)
    out = subprocess.run([sys.executable, "-m", "trappm_ray.cli", "graph", str(path), "--batch-size",
                          "4", "--dim", "seq=512", "--json"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["nodes"] == len(g.ops)


def test_text_model_lean_export_equals_real_export():
    lean, _ = text_models.export_text_model("hf_t5_small_encoder", meta_init=True)
    real, _ = text_models.export_text_model("hf_t5_small_encoder", meta_init=False)
    assert _same(featurize(lean, batch_size=2, dims={"seq": 64}), featurize(real, batch_size=2, dims={"seq": 64}))


@pytest.mark.parametrize("dynamo", [False, True])
def test_torchvision_exports(dynamo):
    onnx_bytes, params = torchvision_models.export_torchvision("torchvision_squeezenet1_1", 96, dynamo=dynamo)
    g = featurize(onnx_bytes, batch_size=12, resolution=96)
    assert g.static["batch_size"] == 12 and params == 1_235_496


def test_build_shard_keys_text_graphs_by_sequence_length(tmp_path):
    entry = build_shard("hf_t5_small_encoder", 128, (1, 4), str(tmp_path), source="hf", meta_init=True)
    assert entry["status"] == "ok", entry["error"]
    rows = pq.read_table(tmp_path / entry["shard"]).to_pylist()
    assert [(r["resolution"], r["batch_size"]) for r in rows] == [(128, 1), (128, 4)]
    assert rows[0]["exporter"] == sources.export("hf_t5_small_encoder", 128, "hf").exporter


def test_build_shard_builds_dynamo_torchvision_names(tmp_path):
    entry = build_shard("torchvision_dynamo_squeezenet1_1", 64, (2,), str(tmp_path), source="torchvision")
    assert entry["status"] == "ok", entry["error"]
    assert entry["exporter"] == torchvision_models.EXPORTER_DYNAMO
