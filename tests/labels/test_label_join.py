"""Graphs of new label keys are appended to the committed graphs file; old rows are kept."""
import json

import pyarrow as pa
import pyarrow.compute as pc

from tests.label_builders import SLUG, make_labeled_dir
from tests.onnx_builders import cnn_model
from trappm_ray import storage
from trappm_ray.labels.label_join import extend_joined_graphs
from trappm_ray.graph.featurize import featurize
from trappm_ray.graph.rows import graph_to_row
from trappm_ray.labels.store import compact, read_rows, write_rows


def test_new_keys_join_from_the_corpus_and_old_rows_stay(tmp_path):
    labels = make_labeled_dir(str(tmp_path / "labels"))
    before = storage.read_table(storage.join(labels, "graphs.parquet"))
    rows = read_rows(labels, SLUG).filter(pc.equal(pc.field("arch"), "cnn8")).to_pylist()[:1]
    new = [dict(rows[0], device_slug="gpu-x", batch_size=64), dict(rows[0], device_slug="gpu-x", arch="gone")]
    write_rows(labels, "gpu-x", new)
    compact(labels, "gpu-x")
    corpus = tmp_path / "corpus"
    graph = featurize(cnn_model(hw=8).SerializeToString(), batch_size=64, resolution=8)
    row = graph_to_row(graph, arch="cnn8", family="cnn", exporter="test")
    row["resolution"] = 8
    storage.write_table(pa.Table.from_pylist([row]), str(corpus / "graphs" / "cnn8@8.parquet"))
    (corpus / "manifest").mkdir()
    (corpus / "manifest" / "cnn8@8.json").write_text(json.dumps(
        {"task": "cnn8@8", "arch": "cnn8", "resolution": 8, "status": "ok", "graphs": 1}))
    (corpus / "manifest" / "gone@8.json").write_text(json.dumps(
        {"task": "gone@8", "arch": "gone", "resolution": 8, "status": "error", "graphs": 0,
         "error": "export: RuntimeError: no"}))

    summary = extend_joined_graphs(labels, str(corpus))

    after = storage.read_table(storage.join(labels, "graphs.parquet"))
    assert summary["added"] == 1 and summary["kept"] == before.num_rows
    assert after.slice(0, before.num_rows).to_pylist() == before.to_pylist()
    assert after.slice(before.num_rows).column("batch_size").to_pylist() == [64]
    assert summary["missing"] == {"export failed": [("gone", 8, rows[0]["batch_size"])]}
    assert summary["label_rows_missing"] == 1
    unjoined = (tmp_path / "labels" / "unjoined.csv").read_text().splitlines()
    assert unjoined == ["arch,resolution,batch_size,reason,error",
                        f"gone,8,{rows[0]['batch_size']},export failed,export: RuntimeError: no"]


def test_an_architecture_timm_no_longer_has_is_listed_as_such(tmp_path):
    labels = make_labeled_dir(str(tmp_path / "labels"))
    row = read_rows(labels, SLUG).to_pylist()[0]
    write_rows(labels, "gpu-x", [dict(row, device_slug="gpu-x", arch="renamed_net")])
    compact(labels, "gpu-x")
    corpus = tmp_path / "corpus"
    (corpus / "manifest").mkdir(parents=True)
    (corpus / "manifest" / f"renamed_net@{row['resolution']}.json").write_text(json.dumps(
        {"task": f"renamed_net@{row['resolution']}", "arch": "renamed_net", "status": "error",
         "resolution": row["resolution"], "graphs": 0,
         "error": "export: RuntimeError: Unknown model (renamed_net)"}))
    (corpus / "dataset.json").write_text(json.dumps({"versions": {"timm": "9.9.9"}}))

    summary = extend_joined_graphs(labels, str(corpus), dry_run=True)

    assert summary["missing"] == {"not in timm 9.9.9": [("renamed_net", row["resolution"],
                                                        row["batch_size"])]}


def test_a_corpus_of_other_keys_keeps_the_listed_reasons(tmp_path):
    """Joining a corpus built for a few keys (an older timm's) leaves the reasons of the keys it
    never built as the label store listed them."""
    labels = make_labeled_dir(str(tmp_path / "labels"))
    row = read_rows(labels, SLUG).to_pylist()[0]
    write_rows(labels, "gpu-x", [dict(row, device_slug="gpu-x", arch="moe_net")])
    compact(labels, "gpu-x")
    key = f"moe_net,{row['resolution']},{row['batch_size']}"
    (tmp_path / "labels" / "unjoined.csv").write_text(
        f"arch,resolution,batch_size,reason,error\n{key},featurize failed,UnresolvedShapes\n")
    corpus = tmp_path / "corpus"
    (corpus / "manifest").mkdir(parents=True)

    summary = extend_joined_graphs(labels, str(corpus))

    assert summary["missing"] == {"featurize failed": [("moe_net", row["resolution"], row["batch_size"])]}
    assert (tmp_path / "labels" / "unjoined.csv").read_text().splitlines()[1] == \
        f"{key},featurize failed,UnresolvedShapes"


def test_label_tasks_list_the_unjoined_keys_of_every_device(tmp_path):
    from trappm_ray.labels.label_join import label_tasks, labeled_architectures

    labels = str(tmp_path / "labels")
    row = {"status": "ok", "resolution": 64, "train_step_ms": 1.0}
    write_rows(labels, "gpu-a", [{**row, "device_slug": "gpu-a", "arch": "resnet18", "batch_size": b}
                                 for b in (1, 8)])
    write_rows(labels, "gpu-b", [{**row, "device_slug": "gpu-b", "arch": "vit_tiny_patch16_224", "batch_size": 4,
                                  "train_step_ms": None},
                                 {**row, "device_slug": "gpu-b", "arch": "hf_gpt2", "resolution": 128,
                                  "batch_size": 2}])
    for slug in ("gpu-a", "gpu-b"):
        compact(labels, slug)
    storage.write_table(pa.Table.from_pylist([{"arch": "resnet18", "resolution": 64, "batch_size": 8}]),
                        storage.join(labels, "graphs.parquet"))
    tasks = {(t.arch, t.resolution): t for t in label_tasks(labels, {"hf_gpt2"})}
    assert tasks[("resnet18", 64)].batch_sizes == (1,) and tasks[("resnet18", 64)].group == "timm-train"
    assert tasks[("vit_tiny_patch16_224", 64)].group == "timm-infer"
    assert tasks[("hf_gpt2", 128)].source == "hf"
    assert len(label_tasks(labels, {"hf_gpt2"}, skip_joined=False)[0].batch_sizes) >= 1
    assert labeled_architectures(labels) == {"resnet18", "vit_tiny_patch16_224", "hf_gpt2"}
