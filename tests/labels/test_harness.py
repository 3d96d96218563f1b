"""Tests of the label measurement harness on timm's tiny test models (CPU, a few seconds each)."""
from __future__ import annotations

import pytest

pytest.importorskip("timm")

from trappm_ray.labels import harness as labels  # noqa: E402
from trappm_ray.labels import machine  # noqa: E402
from trappm_ray.labels import store  # noqa: E402

TINY = "test_efficientnet"  # ~0.36 M params; its BatchNorm head rejects batch 1 at 32 px
PROVENANCE = ("device_slug", "device_name", "driver", "cuda", "torch_version", "timm_version",
              "exporter", "machine_id", "boot_id", "warmup", "steps", "date", "harness_version",
              "threads", "cores", "load_avg_before", "load_avg_after")


def test_measure_tiny_model_on_cpu():
    row = labels.measure(labels.MeasureSpec(TINY, batch_size=2, resolution=32, warmup=1, steps=3))
    assert set(row) == set(store.COLUMNS)
    assert row["status"] == "ok", row["error"]
    assert row["error"] is None
    for prefix in ("train_step_ms", "inference_ms"):
        assert 0 < row[f"{prefix}_min"] <= row[f"{prefix}_p10"] <= row[prefix]
        assert row[prefix] <= row[f"{prefix}_p90"] <= row[f"{prefix}_max"]
    assert row["train_steps_timed"] == row["inference_steps_timed"] == 3
    assert row["mem_baseline_mb"] > 100  # interpreter + torch
    assert row["mem_peak_rss_mb"] > row["mem_baseline_mb"]
    assert row["mem_above_baseline_mb"] == pytest.approx(row["mem_peak_rss_mb"] - row["mem_baseline_mb"])
    assert row["params"] > 0 and row["family"] == "test"
    assert 0 < row["ref_step_ms"] < 5000 and row["harness_version"] == labels.HARNESS_VERSION
    for col in PROVENANCE:
        assert row[col] is not None, col
    assert row["device"] == "cpu" and row["cuda"] == "cpu" and row["device_slug"].endswith("-t1")
    assert len(row["cores"].split(",")) == 1  # pinned to one core (2-core machine, 1 thread)
    for col in ("power_w_mean", "power_w_max", "nvml_used_mb", "cuda_max_allocated_mb",
                "cuda_max_reserved_mb"):
        assert row[col] is None, col


def test_memory_cap_gives_oom_row():
    row = labels.measure(labels.MeasureSpec(TINY, 2, 32, warmup=1, steps=3, memory_cap_mb=1))
    assert row["status"] == "oom", row["error"]
    assert "allocate" in row["error"].lower() or "memory" in row["error"].lower()
    assert row["train_step_ms"] is None and row["memory_cap_mb"] == 1


def test_sweep_stops_at_first_oom():
    seen = []
    rows = labels.sweep(TINY, 32, [4096, 2, 4, 8192], warmup=1, steps=3, memory_cap_mb=200,
                        on_row=seen.append)
    assert [(r["batch_size"], r["status"]) for r in rows] == [(2, "ok"), (4, "ok"), (4096, "oom")]
    assert seen == rows


def test_sweep_error_moves_on_and_slow_sizes_are_skipped():
    rows = labels.sweep(TINY, 32, [1, 2, 4, 8], warmup=1, steps=3, max_step_s=1e-6)
    assert [(r["batch_size"], r["status"]) for r in rows] == [
        (1, "error"), (2, "ok"), (4, "skipped_slow"), (8, "skipped_slow")]
    assert "BatchNorm" in rows[0]["error"] or "value per channel" in rows[0]["error"]
    assert rows[2]["train_step_ms"] is None and rows[2]["device_name"] is not None


def test_time_cap_and_timeout():
    row = labels.measure(labels.MeasureSpec(TINY, 2, 32, warmup=1, steps=50, max_timed_seconds=0.0))
    assert row["status"] == "ok" and row["train_steps_timed"] == labels.MIN_TIMED_STEPS
    row = labels.measure(labels.MeasureSpec("resnet18", 8, 64, warmup=5, steps=20, timeout_s=1.0))
    assert row["status"] == "timeout" and row["wall_s"] < 10


def test_spec_defaults_and_validation():
    assert (labels.MeasureSpec("a", 1, 32).warmup, labels.MeasureSpec("a", 1, 32).steps) == labels.CPU_DEFAULTS
    spec = labels.MeasureSpec("a", 1, 32, device="cuda", dtype="bfloat16")
    assert (spec.warmup, spec.steps) == labels.CUDA_DEFAULTS
    with pytest.raises(ValueError):
        labels.MeasureSpec("a", 1, 32, dtype="float16")  # half precision only on CUDA
    with pytest.raises(ValueError):
        labels.MeasureSpec("a", 1, 32, optimizer="lamb")


def test_device_info():
    info = machine.device_info("cpu")
    assert info["device_name"] and info["torch_version"] and info["timm_version"]
    assert info["date"].endswith("+00:00") and len(info["machine_id"]) == 12
    assert len(info["boot_id"]) == 12 and info["boot_id"] != info["machine_id"]
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception:  # no GPU here: the harness must say so clearly, not leak NVMLError
        with pytest.raises(RuntimeError, match="NVML"):
            machine.device_info("cuda")
    else:
        assert machine.device_info("cuda")["driver"] != "cpu"


def test_wait_for_load_waits_until_quiet_or_gives_up(monkeypatch):
    loads = iter([3.0, 2.2, 1.4, 1.4, 9.0])
    busy = iter([1.0, 0.1])  # read only when the load average is low enough
    monkeypatch.setattr(machine.os, "getloadavg", lambda: (next(loads), 0.0, 0.0))
    monkeypatch.setattr(machine, "busy_cpus", lambda window_s: next(busy))
    slept = []
    monkeypatch.setattr(machine.time, "sleep", slept.append)
    machine.wait_for_load(1.5, max_wait_s=60, poll_s=5)
    # 3.0 and 2.2 are too busy on average, the first 1.4 still busy right now, then quiet
    assert slept == [5, 5, 5]
    monkeypatch.setattr(machine.os, "getloadavg", lambda: (4.0, 0.0, 0.0))
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(machine.time, "monotonic", lambda: next(clock))
    waited = machine.wait_for_load(1.5, max_wait_s=30, poll_s=5)
    assert waited >= 30 and len(slept) == 3 + 2  # gave up after 30 s of a busy machine
