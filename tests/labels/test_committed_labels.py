"""The committed label dataset: unique keys, complete provenance, every ok row joins a graph."""
from collections import Counter
from pathlib import Path

import pytest

import csv

from trappm_ray import storage
from trappm_ray.labels.label_join import UNJOINED_FILE
from trappm_ray.labels import store
from trappm_ray.labels.campaign_import import is_campaign_device
from trappm_ray.graph.rows import GRAPHS_FILE
from trappm_ray.labels.examples import GRAPH_KEY, load_examples, same_model
from trappm_ray.labels.public import read_raw
from trappm_ray.labels.store import compact_labels, device_slugs

LABELS = str(Path(__file__).resolve().parents[2] / "data" / "labels")
SLUGS = device_slugs(LABELS)
# Devices this project's harness measured; imported ones have their own provenance checks
# (tests/labels/test_committed_public_labels.py).
MEASURED_HERE = [s for s in SLUGS if read_raw(LABELS, s) is None]


def test_there_are_committed_labels():
    assert SLUGS, f"no device directories under {LABELS}"


@pytest.mark.parametrize("slug", MEASURED_HERE)
def test_keys_unique_and_provenance_complete(slug):
    rows = compact_labels(LABELS, slug).to_pylist()
    dup = [k for k, n in Counter(tuple(r[k] for k in store.KEY) for r in rows).items() if n > 1]
    assert not dup, dup[:5]
    # the GPU campaign builds models in PyTorch on its machine (no export, no CPU thread count)
    # and says which driver and CUDA ran them instead
    local = ("exporter", "threads") if not is_campaign_device(LABELS, slug) else ("driver", "cuda", "method")
    for col in ("device_name", "torch_version", "timm_version", "date", "warmup", "steps", "machine_id",
                "harness_version", *local):
        missing = [r["arch"] for r in rows if r[col] is None]
        assert not missing, (col, missing[:5])


@pytest.mark.parametrize("slug", MEASURED_HERE)
def test_every_ok_row_joins_a_graph(slug):
    graphs = storage.read_table(storage.join(LABELS, GRAPHS_FILE), columns=list(GRAPH_KEY))
    keys = set(zip(*(graphs.column(k).to_pylist() for k in GRAPH_KEY)))
    ok = [r for r in compact_labels(LABELS, slug).to_pylist() if r["status"] == "ok"]
    unjoined = [tuple(r[k] for k in GRAPH_KEY) for r in ok if tuple(r[k] for k in GRAPH_KEY) not in keys]
    assert not unjoined, unjoined[:5]
    # a campaign folder varies settings over one graph: one example per graph and setting
    select = {"memory_format": "nchw", "recompute": "none", "grad_accum": 1} if is_campaign_device(LABELS, slug) else {}
    chosen = [r for r in ok if all(r[k] == v for k, v in select.items())]
    assert len(load_examples(LABELS, slug, targets=("train_step_ms",), select=select)) == len(chosen)


IMPORTED = [s for s in SLUGS if s not in MEASURED_HERE]


def _graph_keys() -> set:
    graphs = storage.read_table(storage.join(LABELS, GRAPHS_FILE), columns=list(GRAPH_KEY))
    return set(zip(*(graphs.column(k).to_pylist() for k in GRAPH_KEY)))


def _unjoined() -> dict[tuple, str]:
    with open(storage.join(LABELS, UNJOINED_FILE)) as f:
        return {(r["arch"], int(r["resolution"]), int(r["batch_size"])): r["reason"]
                for r in csv.DictReader(f)}


# Imported devices: every ok row joins a graph, or its key is listed in unjoined.csv with the
# reason the GPU corpus build gives (export or featurize failure); the datasheets state the share.
@pytest.mark.parametrize("slug", IMPORTED)
def test_every_imported_ok_row_joins_or_is_listed_with_a_reason(slug):
    keys, listed = _graph_keys(), _unjoined()
    ok = [tuple(r[k] for k in GRAPH_KEY) for r in compact_labels(LABELS, slug).to_pylist() if r["status"] == "ok"]
    silent = [k for k in ok if k not in keys and k not in listed]
    assert not silent, silent[:5]
    assert all(listed[k] for k in ok if k not in keys)


def test_unjoined_list_is_current():
    assert not set(_unjoined()) & _graph_keys()  # a listed key that has a graph is stale


def test_a_row_does_not_join_the_graph_of_another_model_exported_under_its_name():
    """timm builds ``resnext101_32x8d`` (89 M parameters) for ``ig_resnext101_32x48d`` (the row
    states 828 M): that graph is not the model measured, so the examples leave the row out; a
    graph that keeps buffers as initializers (more parameters than stated) still joins."""
    graphs = {(g["arch"], g["resolution"], g["batch_size"]): g for g in
              storage.read_table(storage.join(LABELS, GRAPHS_FILE), columns=[*GRAPH_KEY, "params"]).to_pylist()}
    rows = {r["arch"]: r for r in compact_labels(LABELS, "rtx3090-amp").to_pylist()
            if r["status"] == "ok" and r["arch"] in ("ig_resnext101_32x48d", "resnext101_32x8d", "nf_resnet50")}
    joined = {a: same_model(r, graphs[tuple(r[k] for k in GRAPH_KEY)]) for a, r in rows.items()}
    assert joined == {"ig_resnext101_32x48d": False, "resnext101_32x8d": True, "nf_resnet50": True}
    assert same_model({"params": None}, {"params": 1.0}) and not same_model({"params": 100.0}, {"params": 89.0})
