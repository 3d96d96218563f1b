"""Noise summary math (the measurement itself is faked; the harness has its own tests)."""
from trappm_ray.labels import store
from trappm_ray.labels import noise as label_noise
from trappm_ray.labels import harness as labels
from trappm_ray.labels import machine


def _row(arch, ms, load=0.5):
    return {"arch": arch, "family": "resnet", "resolution": 32, "batch_size": 2,
            "dtype": "float32", "optimizer": "adam", "device": "cpu", "status": "ok",
            "warmup": 1, "steps": 3, "threads": 1, "train_step_ms": ms, "inference_ms": ms / 2,
            "mem_peak_rss_mb": 500.0, "mem_above_baseline_mb": 50.0, "device_slug": "cpu-t1",
            "load_avg_before": load, "load_avg_after": load, "date": "2026-11-22"}


def test_remeasure_reports_relative_differences(tmp_path, monkeypatch):
    out = str(tmp_path)
    store.write_rows(out, "cpu-t1", [_row("a", 100.0), _row("b", 200.0),
                                         _row("busy", 100.0, load=3.0),
                                         _row("busier", 100.0, load=4.0)])
    new = {"a": 110.0, "b": 150.0, "busy": 100.0, "busier": 100.0}
    monkeypatch.setattr(machine, "device_info", lambda device: {"device": device})
    monkeypatch.setattr(labels, "measure", lambda spec, info: {
        "status": "ok", "train_step_ms": new[spec.arch], "inference_ms": new[spec.arch] / 2,
        "mem_peak_rss_mb": 500.0, "mem_above_baseline_mb": 60.0})
    result = label_noise.remeasure(out, "cpu-t1", n=2)
    assert sorted(r["arch"] for r in result["rows"]) == ["a", "b"]  # the quieter half
    s = result["summary"]
    assert abs(s["train_step_ms"]["median"] - 0.175) < 1e-9  # (0.10 + 0.25) / 2
    assert abs(s["train_step_ms"]["worst"] - 0.25) < 1e-9
    assert s["mem_peak_rss_mb"]["worst"] == 0.0
    assert abs(s["mem_above_baseline_mb"]["median"] - 0.2) < 1e-9
    assert abs(s["train_step_ms"]["ratio_median"] - 0.925) < 1e-9  # (1.10 + 0.75) / 2
    assert result["measured_on"] == {"device": "cpu"} and result["rows"][0]["stored_date"]


def test_max_load_draws_only_quiet_rows_and_waits(tmp_path, monkeypatch):
    out = str(tmp_path)
    rows = [_row(f"quiet{i}", 100.0, load=1.0) for i in range(2)]
    rows += [_row(f"busy{i}", 100.0, load=2.0 + i) for i in range(6)]
    store.write_rows(out, "cpu-t1", rows)
    waits = []
    monkeypatch.setattr(machine, "device_info", lambda device: {"device": device})
    monkeypatch.setattr(machine, "wait_for_load", lambda limit, max_wait: waits.append(limit) or 0.0)
    monkeypatch.setattr(labels, "measure", lambda spec, info: {
        "status": "ok", "train_step_ms": 100.0, "inference_ms": 50.0,
        "mem_peak_rss_mb": 500.0, "mem_above_baseline_mb": 50.0})
    result = label_noise.remeasure(out, "cpu-t1", n=2, max_load=1.5)
    # the quieter half alone (4 rows) would include busy ones
    assert sorted(r["arch"] for r in result["rows"]) == ["quiet0", "quiet1"]
    assert waits == [1.5, 1.5]


def test_compare_sets_splits_by_the_old_rows_load(tmp_path):
    old, new = str(tmp_path / "old"), str(tmp_path / "new")
    store.write_rows(old, "cpu-t1", [_row("a", 100.0), _row("b", 200.0, load=3.0),
                                         _row("only-old", 50.0)])
    store.write_rows(new, "cpu-t1", [_row("a", 90.0), _row("b", 150.0), _row("only-new", 9.0)])
    got = label_noise.compare_sets(old, new, "cpu-t1")
    step = got["train_step_ms"]
    assert step["all"]["n"] == 2 and abs(step["all"]["ratio_median"] - 0.825) < 1e-9
    assert step["old_quiet"]["ratio_median"] == 0.9 and step["old_busy"]["ratio_median"] == 0.75
    assert abs(step["old_busy"]["abs_diff_median"] - 0.25) < 1e-9
