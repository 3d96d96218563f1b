"""The corpus builder end to end: real timm exports, Ray tasks, local directory and real S3."""
import json

import pyarrow as pa
import pytest

from trappm_ray.corpus import build as dataset
from trappm_ray import storage
from trappm_ray.graph import rows
from trappm_ray.corpus.build import DatasetConfig, build

ARCHS = ("test_resnet", "test_vit", "no_such_arch_xyz")


def _check_corpus(out: str, summary) -> None:
    manifest = {e["task"]: e for e in dataset.read_manifest(out)}
    assert set(manifest) == {f"{a}@32" for a in ARCHS}
    bad = manifest["no_such_arch_xyz@32"]
    assert bad["status"] == "error" and "no_such_arch_xyz" in bad["error"]
    for arch in ARCHS[:2]:
        entry = manifest[f"{arch}@32"]
        assert entry["status"] == "ok", entry
        table = storage.read_table(storage.join(out, entry["shard"]))
        assert table.num_rows == entry["graphs"] == 3  # manifest matches the parquet rows
        assert sorted(table.column("batch_size").to_pylist()) == [1, 2, 4]
        g = rows.row_to_graph(table.to_pylist()[0])
        assert g.num_nodes == g.static["nodes"] > 10 and g.static["params"] > 0
        assert storage.exists(storage.join(out, "onnx", f"{arch}@32.onnx"))
    consolidated = storage.read_table(storage.join(out, "manifest.parquet"))
    assert consolidated.num_rows == len(ARCHS)
    provenance = json.loads(storage.read_bytes(storage.join(out, "dataset.json")))
    assert "legacy" in provenance["exporter"] and provenance["versions"]["torch"]
    assert summary.graphs == 6 and summary.archs_ok == 2 and summary.failed == 1


def _run(out: str):
    cfg = DatasetConfig(out=out, archs=ARCHS, resolutions=(32,), batch_sizes=(1, 2, 4))
    first = build(cfg)
    _check_corpus(out, first)
    again = build(cfg)  # resume: nothing left to do
    assert again.ran == 0 and again.graphs == first.graphs
    retry = build(DatasetConfig(**{**cfg.__dict__, "retry_failed": True}))
    assert retry.ran == 1  # only the failed architecture is retried


def test_build_local(ray_session, tmp_path):
    _run(str(tmp_path / "corpus"))


@pytest.mark.s3
def test_build_s3(ray_session, s3_prefix):
    _run(s3_prefix)


def test_row_roundtrip():
    from trappm_ray.graph.featurize import featurize
    from trappm_ray.corpus.zoo import export_skeleton

    g = featurize(export_skeleton("test_efficientnet", 32).onnx_bytes, batch_size=3)
    row = rows.graph_to_row(g, arch="test_efficientnet", family="efficientnet")
    back = rows.row_to_graph(pa.Table.from_pylist([row]).to_pylist()[0])
    assert back.ops == g.ops and (back.edge_index == g.edge_index).all()
    assert (back.macs == g.macs).all() and (back.in_shape == g.in_shape).all()
    assert back.static == g.static


def test_select_architectures_covers_paper_families():
    from trappm_ray.corpus import zoo

    archs = dataset.select_architectures(other_per_family=1)
    fams = {zoo.family_of(a) for a in archs}
    assert set(zoo.PAPER_FAMILIES) <= fams and len(archs) > 400


def test_labeled_architectures_are_exported_whatever_their_size(ray_session, tmp_path):
    from trappm_ray.labels import store
    from trappm_ray.labels.label_join import build_labeled

    labels = str(tmp_path / "labels")
    store.write_rows(labels, "cpu-t1", [{"arch": "test_vit", "resolution": 32, "batch_size": 1,
                                             "status": "ok", "device_slug": "cpu-t1"}])
    out = str(tmp_path / "corpus")
    cfg = DatasetConfig(out=out, archs=("test_resnet",), resolutions=(32,), batch_sizes=(1,),
                        max_params=1)
    build(cfg)
    manifest = {e["task"]: e for e in dataset.read_manifest(out)}
    assert manifest["test_resnet@32"]["status"] == "skipped" and "test_vit@32" not in manifest
    with pytest.raises(ValueError, match="label store"):  # the labels stage reads its store
        build(DatasetConfig(**{**cfg.__dict__, "labels": labels}))
    again = build_labeled(DatasetConfig(**{**cfg.__dict__, "labels": labels}))
    manifest = {e["task"]: e for e in dataset.read_manifest(out)}
    assert again.ran == 1 and manifest["test_vit@32"]["status"] == "ok"  # too large, but labeled
    assert manifest["test_resnet@32"]["status"] == "skipped"
