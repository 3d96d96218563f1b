"""GAE pretraining on Ray Train: a tiny corpus, 2 DDP workers, checkpoints, resume, restarts."""
import json

import pyarrow.parquet as pq
import pytest
import torch

from trappm_ray import storage
from trappm_ray.config_cli import parse_config
from trappm_ray.corpus.loader import graph_files, row_to_data
from trappm_ray.train.pretrain import PretrainConfig, load_encoder, pretrain

@pytest.fixture(scope="module")
def corpus(tiny_corpus):
    return tiny_corpus


def _cfg(corpus, storage_uri, **kw):
    base = dict(corpus=corpus, storage=storage_uri, name="gae", dims=(32, 16), epochs=1,
                batch_size=2, num_workers=2, cpus_per_worker=0.5, use_gpu="false",
                max_failures=1)
    return PretrainConfig(**{**base, **kw})


def test_config_from_flags():
    cfg = parse_config(PretrainConfig, ["--corpus", "s3://b/c", "--dims", "32,16",
                                        "--cpus-per-worker", "0.5", "--cache", "true"])
    assert cfg.dims == (32, 16) and cfg.cpus_per_worker == 0.5 and cfg.cache is True
    paper = PretrainConfig()
    assert paper.dims == (1024, 512, 512, 512) and paper.lr == 5e-4 and paper.dropout == 0.5
    assert paper.use_gpu == "auto" and paper.feature_set == "v2"


def _check_encoder(result, corpus, epoch):
    encoder, meta = load_encoder(result.encoder)
    assert meta["epoch"] == epoch and meta["dims"] == [32, 16] and meta["feature_set"] == "v2"
    # the sidecar holds the run's config: the command that regenerates this encoder
    cfg = meta["config"]
    assert cfg["dims"] == [32, 16] and cfg["epochs"] >= epoch and "ray_address" not in cfg
    row = pq.read_table(graph_files(corpus)[0]).to_pylist()[0]
    d = row_to_data(row)
    with torch.no_grad():
        assert encoder(d.x, d.edge_index).shape == (d.num_nodes, 16)


def _check_first(first, corpus):
    assert (first.start_epoch, first.epoch, first.epochs_run) == (0, 1, 1)
    assert first.final_loss is not None and 0 < first.final_loss < 10
    assert len(first.graphs_per_s_per_worker) == 2 and min(first.graphs_per_s_per_worker) > 0
    _check_encoder(first, corpus, 1)


def _check_resume(first, corpus, storage_uri):
    # same name, more epochs: continues from the stored epoch instead of starting over
    second = pretrain(_cfg(corpus, storage_uri, epochs=2))
    assert (second.start_epoch, second.epoch, second.epochs_run) == (1, 2, 1)
    assert second.checkpoint != first.checkpoint
    _check_encoder(second, corpus, 2)
    sidecar = json.loads(storage.read_bytes(storage.join(storage_uri, "gae", "encoder.json")))
    assert sidecar["epoch"] == 2 and sidecar["corpus"] == corpus
    return second


@pytest.fixture(scope="module")
def local_run(ray_session, corpus, tmp_path_factory):
    """One epoch on 2 workers; the resume test continues this run (each fit takes ~30 s here)."""
    runs = str(tmp_path_factory.mktemp("runs"))
    return pretrain(_cfg(corpus, runs)), runs


def test_pretrain_local(local_run, corpus):
    _check_first(local_run[0], corpus)
    assert local_run[0].checkpoint.startswith(local_run[1])


def test_resume_local(local_run, corpus):
    _check_resume(local_run[0], corpus, local_run[1])


def _s3_corpus(corpus, prefix):
    remote = storage.join(prefix, "corpus")
    for f in graph_files(corpus):
        storage.write_bytes(storage.join(remote, "graphs", f.rsplit("/", 1)[1]),
                            storage.read_bytes(f))
    return remote


@pytest.mark.s3
def test_pretrain_s3(ray_session, corpus, s3_prefix):
    """Corpus read from and checkpoints + encoder written to the radosgw server."""
    remote, runs = _s3_corpus(corpus, s3_prefix), storage.join(s3_prefix, "runs")
    first = pretrain(_cfg(remote, runs, num_workers=1))
    assert first.checkpoint.startswith(runs + "/gae/checkpoint_") and first.epoch == 1
    assert storage.exists(storage.join(runs, "gae", "encoder.pt"))
    _check_encoder(first, remote, 1)


@pytest.mark.s3
@pytest.mark.slow
def test_resume_s3(ray_session, corpus, s3_prefix):
    """Two fits (~80 s on a loaded 2-core machine): the second restores from S3 checkpoints."""
    remote, runs = _s3_corpus(corpus, s3_prefix), storage.join(s3_prefix, "runs")
    pretrain(_cfg(remote, runs, num_workers=1))
    second = pretrain(_cfg(remote, runs, num_workers=1, epochs=2))
    assert (second.start_epoch, second.epoch, second.epochs_run) == (1, 2, 1)


def _kill_a_train_worker_after_a_checkpoint(runs: str, killed: list) -> None:
    """SIGKILL one Ray Train worker process (like an OOM kill) once a checkpoint is stored."""
    import glob
    import os
    import signal
    import time

    import psutil

    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not glob.glob(os.path.join(runs, "gae", "checkpoint_*")):
        time.sleep(0.2)
    time.sleep(2.5)  # past one controller poll (2 s), so the checkpoint is registered
    for proc in psutil.process_iter(["cmdline"]):
        if "RayTrainWorker" in " ".join(proc.info["cmdline"] or []):
            os.kill(proc.pid, signal.SIGKILL)
            killed.append(proc.pid)
            return


@pytest.mark.slow
def test_killed_worker_restarts_from_checkpoint(ray_session, corpus, tmp_path):
    import threading

    runs, killed = str(tmp_path / "runs"), []
    killer = threading.Thread(target=_kill_a_train_worker_after_a_checkpoint, args=(runs, killed))
    killer.start()
    result = pretrain(_cfg(corpus, runs, epochs=12))
    killer.join()
    assert killed  # a worker did die
    # the new worker group restored a stored checkpoint instead of starting over
    assert result.epoch == 12 and result.start_epoch >= 1
    assert result.epochs_run == 12 - result.start_epoch
