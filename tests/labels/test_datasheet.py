"""The labels datasheet: contents, joins, and how smooth each label is in batch size."""
import numpy as np
import pyarrow as pa
import pytest

from tests.label_builders import SLUG, make_labeled_dir
from trappm_ray import storage
from trappm_ray.labels.datasheet import datasheet, neighbour_errors
from trappm_ray.labels.store import SCHEMA


def _row(arch, batch, value, resolution=64):
    return {"arch": arch, "resolution": resolution, "batch_size": batch, "train_step_ms": value}


def test_neighbour_errors_zero_on_a_power_law_and_exact_on_a_kink():
    power = [_row("a", b, 3.0 * b ** 0.8) for b in (1, 2, 4, 8, 16)]
    assert np.allclose(neighbour_errors(power, "train_step_ms"), 0.0)
    # b=2 reads 20% above the line through b=1 and b=4; ends and missing values are skipped
    kink = [_row("k", 1, 10.0), _row("k", 2, 200 ** 0.5 * 1.2),
            _row("k", 4, 20.0), _row("k", 8, None), _row("other", 4, 5.0, 224)]
    err = neighbour_errors(kink, "train_step_ms")
    assert err.shape == (1,) and err[0] == pytest.approx(100 * (1 - 1 / 1.2))


def test_datasheet_reports_counts_joins_and_smoothness(tmp_path):
    root = make_labeled_dir(str(tmp_path))
    # one row of one sweep measured next to other work makes that whole sweep "loaded"
    uri = storage.join(root, SLUG, "labels.parquet")
    rows = storage.read_table(uri).to_pylist()
    rows[0]["load_avg_before"] = 3.0
    storage.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), uri)
    text = datasheet(root, SLUG)
    assert "54 rows, 54 ok" in text and "joined to a graph in `graphs.parquet`: 54 of 54" in text
    assert "exceeded the measurement's threads + 0.5: 1 " in text
    # 9 sweeps of 6 batch sizes: 4 interior rows each; 8 quiet sweeps and 1 loaded
    assert "| `train_step_ms` | all | 36 |" in text
    assert "| `train_step_ms` | quiet | 32 |" in text and "| `train_step_ms` | loaded | 4 |" in text
