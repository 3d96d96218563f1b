"""jobs/batch_predict.py's library: one row per file, error rows, re-runs skip, local and S3."""
from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
import pytest

import onnx_builders as B
import trappm_ray
from predictor_builders import random_predictor
from trappm_ray import errors, storage
from trappm_ray.physics.collectives import Cluster
from trappm_ray.serving.batch import (SCHEMA, BatchPredictConfig, _grouped, done_paths, file_options, list_models,
                                      run)
from trappm_ray.serving.model_input import config_model


@pytest.fixture(scope="module")
def predictor_dir(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("predictor") / "random")
    random_predictor().save(path)
    return path


def write_inputs(put, prefix: str) -> dict[str, str]:
    """Two good models (one in a sub-folder), one corrupt file, one non-ONNX file to ignore."""
    cnn = B.to_bytes(B.cnn_model())
    files = {"good_cnn": (f"{prefix}/cnn.onnx", cnn),
             "good_block": (f"{prefix}/sub/block.onnx", B.to_bytes(B.transformer_block())),
             "corrupt": (f"{prefix}/broken.onnx", cnn[: len(cnn) // 3]),
             "ignored": (f"{prefix}/notes.txt", b"not a model")}
    for uri, data in files.values():
        put(uri, data)
    return {k: uri for k, (uri, _) in files.items()}


def read_rows(dst: str) -> list[dict]:
    rows = []
    for uri in storage.listdir(dst, ".parquet"):
        rows += storage.read_table(uri).to_pylist()
    return rows


def check_rows(rows: list[dict], inputs: dict[str, str]) -> None:
    by_path = {r["path"]: r for r in rows}
    assert len(rows) == 3 and len(by_path) == 3, [r["path"] for r in rows]
    bad = by_path[inputs["corrupt"]]
    assert bad["status"] == "error" and bad["error_code"] == "corrupt_protobuf"
    assert bad["train_step_ms"] is None and "\n" not in bad["error"]
    for key in ("good_cnn", "good_block"):
        r = by_path[inputs[key]]
        assert r["status"] == "ok" and r["error"] is None, r
        assert r["train_step_ms_low"] <= r["train_step_ms"] <= r["train_step_ms_high"]
        assert r["train_memory_mb"] > 0 and r["inference_ms"] > 0 and r["batch_size"] == 2
        assert r["model_version"].startswith("random@") and r["compute"] == "cpu"
    assert by_path[inputs["good_cnn"]]["nodes"] == 5


def test_grouped_writes_whole_blocks_of_at_least_rows():
    import pyarrow as pa

    tables = [pa.table({"x": list(range(n))}) for n in (2, 2, 3)]
    assert [t.num_rows for t in _grouped(tables, 3)] == [4, 3]
    assert [t.num_rows for t in _grouped(tables, 100)] == [7]
    assert list(_grouped([], 3)) == []


def test_list_and_done_paths(tmp_path):
    inputs = write_inputs(lambda p, d: storage.write_bytes(p, d), str(tmp_path / "in"))
    storage.write_bytes(str(tmp_path / "in" / "gpt" / "config.json"), b"{}")
    storage.write_bytes(str(tmp_path / "in" / "gpt" / "other.json"), b"{}")
    assert list_models(str(tmp_path / "in")) == sorted(
        [*(inputs[k] for k in ("good_cnn", "good_block", "corrupt")), str(tmp_path / "in" / "gpt" / "config.json")])
    with pytest.raises(FileNotFoundError):
        list_models(str(tmp_path / "missing"))
    assert done_paths(str(tmp_path / "out"), "v") == set()
    rows = [{"path": "a", "status": "ok", "model_version": "v"},
            {"path": "b", "status": "error", "model_version": "v"},
            {"path": "c", "status": "ok", "model_version": "older"}]
    import pyarrow as pa

    storage.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), str(tmp_path / "out" / "x.parquet"))
    assert done_paths(str(tmp_path / "out"), "v") == {"a", "b"}


def test_local_directory_rows_and_rerun(ray_session, predictor_dir, tmp_path):
    inputs = write_inputs(lambda p, d: storage.write_bytes(p, d), str(tmp_path / "in"))
    cfg = BatchPredictConfig(src=str(tmp_path / "in"), dst=str(tmp_path / "out"),
                             predictor=predictor_dir, batch_size=2, actors=1, rows_per_batch=2,
                             rows_per_file=1)
    first = run(cfg)
    assert (first.files, first.skipped, first.predicted, first.ok, first.errors) == (3, 0, 3, 2, 1)
    check_rows(read_rows(cfg.dst), inputs)
    files = storage.listdir(cfg.dst, ".parquet")
    assert len(files) >= 2  # written as blocks arrive, not in one file at the end
    for f in files:
        assert pq.read_schema(f).equals(SCHEMA, check_metadata=False)

    again = run(cfg)  # nothing new: no Ray work, no new rows
    assert (again.skipped, again.predicted) == (3, 0) and len(read_rows(cfg.dst)) == 3


def test_a_layout_of_every_config_and_an_error_row_for_an_onnx_file(ray_session, tmp_path):
    """The layout call of the Python API as a batch job: each config.json laid out tp x pp x dp."""
    pytest.importorskip("transformers")
    import json

    gpt = {"model_type": "gpt2", "n_embd": 64, "n_layer": 4, "n_head": 4, "n_positions": 128, "vocab_size": 1000}
    storage.write_bytes(str(tmp_path / "in" / "gpt" / "config.json"), json.dumps(gpt).encode())
    storage.write_bytes(str(tmp_path / "in" / "bad" / "config.json"), b"[1, 2]")
    storage.write_bytes(str(tmp_path / "in" / "cnn.onnx"), B.to_bytes(B.cnn_model()))
    cfg = BatchPredictConfig(src=str(tmp_path / "in"), dst=str(tmp_path / "out"),
                             batch_size=2, device="a100", gpus=8, parallel="tp=2,pp=2,dp=2", global_batch=16,
                             recompute=True, actors=1)
    summary = run(cfg)
    assert (summary.files, summary.ok, summary.errors) == (3, 1, 2)
    rows = {os.path.basename(os.path.dirname(r["path"])) if r["path"].endswith(".json") else "onnx": r
            for r in read_rows(cfg.dst)}
    want = trappm_ray.predict(gpt, batch_size=2, device="a100", gpus=8, parallel="tp=2,pp=2,dp=2", global_batch=16,
                              recompute=True)
    assert rows["gpt"]["train_step_ms"] == pytest.approx(want.train_step_ms.value)
    assert rows["bad"]["error_code"] == "not_a_model" and rows["onnx"]["error_code"] == "not_a_model"
    with pytest.raises(errors.BadOption, match="uses 8 GPUs"):
        run(BatchPredictConfig(src=cfg.src, dst=cfg.dst, device="a100", gpus=4, parallel="tp=2,pp=2,dp=2"))


@pytest.mark.slow
def test_rerun_predicts_only_new_files(ray_session, predictor_dir, tmp_path):
    write_inputs(lambda p, d: storage.write_bytes(p, d), str(tmp_path / "in"))
    cfg = BatchPredictConfig(src=str(tmp_path / "in"), dst=str(tmp_path / "out"),
                             predictor=predictor_dir, rows_per_batch=8)
    assert run(cfg).predicted == 3
    storage.write_bytes(str(tmp_path / "in" / "new.onnx"), B.to_bytes(B.layernorm_gelu_model()))
    third = run(cfg)
    assert (third.skipped, third.predicted, third.ok) == (3, 1, 1)
    assert len(read_rows(cfg.dst)) == 4


def test_missing_predictor_fails_before_ray(tmp_path):
    from trappm_ray.model.predictor import PredictorError

    cfg = BatchPredictConfig(src=str(tmp_path), dst=str(tmp_path / "out"),
                             predictor=str(tmp_path / "no-predictor"))
    with pytest.raises(PredictorError):
        run(cfg)


@pytest.mark.s3
def test_s3_prefix_with_a_corrupt_file(ray_session, predictor_dir, s3_prefix):
    inputs = write_inputs(lambda p, d: storage.write_bytes(p, d), f"{s3_prefix}/in")
    cfg = BatchPredictConfig(src=f"{s3_prefix}/in", dst=f"{s3_prefix}/out", predictor=predictor_dir,
                             batch_size=2, actors=1, rows_per_batch=3)
    summary = run(cfg)
    assert (summary.files, summary.ok, summary.errors) == (3, 2, 1)
    check_rows(read_rows(cfg.dst), inputs)
    assert run(cfg).predicted == 0


@pytest.mark.slow
def test_job_script_positional_args(predictor_dir, tmp_path):
    """The thin script: SRC DST positionally, flags after; prints the summary as JSON."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    write_inputs(lambda p, d: storage.write_bytes(p, d), str(tmp_path / "in"))
    script = Path(__file__).resolve().parents[2] / "jobs" / "batch_predict.py"
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PYTHONWARNINGS": "ignore"}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "in"), str(tmp_path / "out"),
                           "--predictor", predictor_dir, "--num-cpus", "1"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert (summary["files"], summary["ok"], summary["errors"]) == (3, 2, 1)


def test_a_text_model_takes_its_sequence_length_from_dim(ray_session, tmp_path):
    tiny = config_model({"n_embd": 32, "n_layer": 1, "n_head": 2, "vocab_size": 500, "n_positions": 64}, "tiny")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "lm.onnx").write_bytes(tiny)
    base = dict(src=str(tmp_path / "in"), batch_size=2, device="a100", rows_per_batch=1)
    run(BatchPredictConfig(dst=str(tmp_path / "none"), **base))
    (row,) = read_rows(str(tmp_path / "none"))
    assert row["status"] == "error" and row["error_code"] == "unresolved_shapes" and "--dim seq=N" in row["error"]
    run(BatchPredictConfig(dst=str(tmp_path / "seq"), dim="seq=32", **base))
    (row,) = read_rows(str(tmp_path / "seq"))
    assert row["status"] == "ok" and row["train_step_ms"] > 0, row
    with pytest.raises(ValueError, match="NAME=N"):
        BatchPredictConfig(dim="seq").setting()


def test_the_batch_jobs_gpus_per_node_changes_its_cluster():
    """--gpus-per-node, as the CLI's: a change to the named cluster, or to the GPU's own."""
    assert BatchPredictConfig(cluster="dgx-a100").setting()["cluster"] == "dgx-a100"
    mine = BatchPredictConfig(gpus_per_node=4).setting()["cluster"]
    named = BatchPredictConfig(cluster="dgx-a100", gpus_per_node=2).setting()["cluster"]
    assert json.loads(mine) == {"gpus_per_node": 4} and json.loads(named) == {"gpus_per_node": 2, "of": "dgx-a100"}
    opts = file_options(32, None, BatchPredictConfig(gpus=8, gpus_per_node=4).setting(), None)
    assert Cluster.of(opts.cluster, Cluster.of("dgx-h100")).gpus_per_node == 4
