"""The committed label dataset: unique keys, complete provenance, every ok row joins a graph."""
from collections import Counter
from pathlib import Path

import pytest

from trappm_ray.labels import harness as L
from trappm_ray import storage
from trappm_ray.labels.job import device_slugs
from trappm_ray.labels.examples import GRAPHS_FILE, KEY, compact_labels, load_examples

LABELS = str(Path(__file__).parent.parent / "data" / "labels")
SLUGS = device_slugs(LABELS)


def test_there_are_committed_labels():
    assert SLUGS, f"no device directories under {LABELS}"


@pytest.mark.parametrize("slug", SLUGS)
def test_keys_unique_and_provenance_complete(slug):
    rows = compact_labels(LABELS, slug).to_pylist()
    dup = [k for k, n in Counter(tuple(r[k] for k in L.KEY) for r in rows).items() if n > 1]
    assert not dup, dup[:5]
    for col in ("device_name", "torch_version", "timm_version", "exporter", "threads", "date",
                "warmup", "steps", "machine_id", "harness_version"):
        missing = [r["arch"] for r in rows if r[col] is None]
        assert not missing, (col, missing[:5])


@pytest.mark.parametrize("slug", SLUGS)
def test_every_ok_row_joins_a_graph(slug):
    graphs = storage.read_table(storage.join(LABELS, GRAPHS_FILE), columns=list(KEY))
    keys = set(zip(*(graphs.column(k).to_pylist() for k in KEY)))
    ok = [r for r in compact_labels(LABELS, slug).to_pylist() if r["status"] == "ok"]
    unjoined = [tuple(r[k] for k in KEY) for r in ok if tuple(r[k] for k in KEY) not in keys]
    assert not unjoined, unjoined[:5]
    assert len(load_examples(LABELS, slug, targets=("train_step_ms",))) == len(ok)
