"""The committed imported GPU labels (jobs/import_labels.py): unique keys, what varies a
measurement and where it comes from on every row, the coverage issue 20 asks for, datasheets."""
from collections import Counter
from pathlib import Path

import pytest

from trappm_ray.labels import store
from trappm_ray.labels.public import read_raw
from trappm_ray.labels.store import compact_labels, device_slugs

ROOT = Path(__file__).resolve().parents[2]
LABELS = str(ROOT / "data" / "labels")
IMPORTED = [s for s in device_slugs(LABELS) if read_raw(LABELS, s) is not None]
REQUIRED = ("precision", "optimizer", "dtype", "memory_format", "gpus", "parallelism", "compiled",
            "model_source", "device_spec", "device_name", "source_repo", "source_commit",
            "source_file", "license", "method", "date_imported", "n_measurements")


def _ok(slug, label):
    return [r for r in compact_labels(LABELS, slug).to_pylist() if r["status"] == "ok" and r[label] is not None]


def test_the_imported_devices_are_there():
    sources = {slug: {r["source_repo"] for r in compact_labels(LABELS, slug).to_pylist()} for slug in IMPORTED}
    repos = set().union(*sources.values()) if sources else set()
    assert {"huggingface/pytorch-image-models", "sitar-lab/NeuSight",
            "ryujaehun/pytorch-gpu-benchmark"} <= repos
    assert {"rtx3090-amp", "rtx4090-amp", "t4-fp32", "mi250-fp32", "titan-rtx-fp16"} <= set(IMPORTED)


@pytest.mark.parametrize("slug", IMPORTED)
def test_keys_unique_and_every_row_says_what_and_where_from(slug):
    rows = compact_labels(LABELS, slug).to_pylist()
    dup = [k for k, n in Counter(tuple(r[k] for k in store.KEY) for r in rows).items() if n > 1]
    assert not dup, dup[:5]
    for col in REQUIRED:
        missing = [r["arch"] for r in rows if r[col] is None]
        assert not missing, (col, missing[:5])
    assert {r["device_slug"] for r in rows} == {slug}
    assert all(r["train_step_ms"] is not None or r["inference_ms"] is not None
               for r in rows if r["status"] == "ok")


def test_coverage_of_the_rtx_cards():
    assert len(_ok("rtx3090-amp", "train_step_ms")) >= 700
    assert len(_ok("rtx3090-amp", "inference_ms")) >= 900
    assert len(_ok("rtx4090-amp", "inference_ms")) >= 900


@pytest.mark.parametrize("slug", IMPORTED)
def test_datasheet_is_generated_and_states_the_noise(slug):
    path = ROOT / "docs" / f"labels_{slug}.md"
    assert path.is_file(), f"run: python jobs/label_datasheet.py --all true ({path} missing)"
    text = path.read_text()
    assert "Noise between torch versions" in text
    raw = read_raw(LABELS, slug).to_pylist()
    repeated = Counter((tuple(r[k] for k in store.KEY), label) for r in raw if r["status"] == "ok"
                       for label in ("train_step_ms", "inference_ms") if r[label] is not None)
    if any(n > 1 for n in repeated.values()):
        assert "between consecutive versions over" in text  # a figure, not only the heading
    else:
        assert "measured more than once" in text
