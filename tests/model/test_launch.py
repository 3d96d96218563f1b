"""Host-bound small workloads: ``trappm_ray.model.launch``."""
from __future__ import annotations

import math

import numpy as np
import pytest

from trappm_ray.model import launch
from trappm_ray.model.device_features import KERNELS_COL, SETTING_COLS


def rows():
    # 100 kernels each; the batch-1 row is host-bound (40 us a kernel), one compiled row is faster
    out = [{"measured": 4.0, "floor": 0.1, "kernels": 100, "compiled": 0, "key": ["gpu", "tiny", 224, 1]},
           {"measured": 0.5, "floor": 0.4, "kernels": 100, "compiled": 1, "key": ["gpu", "tiny", 224, 64]}]
    out += [{"measured": 20.0 * b, "floor": 10.0 * b, "kernels": 100, "compiled": 0, "key": ["gpu", "big", 224, b]}
            for b in (64, 128, 256, 512)]
    return out


def test_profile_takes_the_least_eager_time_per_kernel_and_the_lower_workload_edge():
    p = launch.profile(rows())
    assert p["host_us_per_kernel"] == pytest.approx(40.0) and p["host_row"] == ["gpu", "tiny", 224, 1]
    floors_us = np.array([0.1, 640, 1280, 2560, 5120]) * 1e3 / 100
    assert p["floor_us_per_kernel_p05"] == pytest.approx(np.quantile(floors_us, 0.05), rel=1e-3)
    assert p["batch_max"] == 512 and p["rows"] == 5  # the compiled row is not eager PyTorch
    assert launch.profile([r for r in rows() if r["compiled"]]) == {}


def test_profiles_of_examples_skip_cpu_rows_and_split_by_target():
    def example(kind, target, measured):
        x = np.zeros(KERNELS_COL + 1)
        x[KERNELS_COL] = math.log(50)
        return {"kind": kind, "target": target, "measured": measured, "floor": 1.0, "x": x,
                "setting": tuple(0 for _ in SETTING_COLS), "slug": kind, "rkey": ("m", 224, 8)}
    found = launch.profiles([example("cuda", "inference_ms", 5.0), example("cpu", "inference_ms", 0.5),
                             example("cuda", "train_step_ms", 10.0)])
    assert set(found) == {"inference_ms", "train_step_ms"}
    assert found["inference_ms"]["host_us_per_kernel"] == pytest.approx(100.0)  # 5 ms / 50, not the CPU's
    assert found["train_step_ms"]["rows"] == 1 and found["train_step_ms"]["batch_max"] == 8


def test_anchor_doubles_until_the_floor_reaches_the_edge_and_stays_inside_the_labeled_batches():
    prof = {"floor_us_per_kernel_p05": 100.0, "batch_max": 1024}
    # floor 0.2 ms + 0.1 ms a sample over 10 kernels: the edge (1 ms) is reached at batch 8 (batch 4: 0.6)
    assert launch.anchor_batch(1, 0.3, 0.4, 10, prof) == 8
    assert launch.below_edge(0.3, 10, prof) and not launch.below_edge(1.0, 10, prof)
    assert launch.anchor_batch(1, 0.001, 0.002, 10, prof) == 1024  # never beyond the labels
    assert launch.anchor_batch(4, 0.3, 0.3, 10, prof) == 1024  # a flat floor never reaches it
    assert not launch.below_edge(0.3, 10, {})


def test_extrapolate_keeps_the_host_share_and_scales_the_rest_with_the_floor():
    # anchor 50 ms at floor 20 ms; 100 kernels x 40 us = 4 ms of host time
    at = lambda floor: launch.extrapolate(50.0, 20.0, floor, 100, 40.0)  # noqa: E731
    assert at(20.0) == pytest.approx(50.0)
    assert at(2.0) == pytest.approx(4.0 + 46.0 * 0.1)
    assert at(0.0) == pytest.approx(4.0)
    series = [at(f) for f in (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)]
    assert all(a <= b <= 2 * a for a, b in zip(series, series[1:]))  # monotone, never more than doubling
    assert launch.extrapolate(3.0, 20.0, 1.0, 100, 40.0) == pytest.approx(3.0)  # host share <= anchor
