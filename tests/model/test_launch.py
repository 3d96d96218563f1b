"""Host-bound small workloads: ``trappm_ray.model.launch``."""
from __future__ import annotations

import math
from types import SimpleNamespace

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
        x[KERNELS_COL] = math.log(80)  # the roofline's node count: not what the host issues
        return {"kind": kind, "target": target, "measured": measured, "floor": 1.0, "x": x, "launches": 50,
                "setting": tuple(0 for _ in SETTING_COLS), "slug": kind, "rkey": ("m", 224, 8)}
    found = launch.profiles([example("cuda", "inference_ms", 5.0), example("cpu", "inference_ms", 0.5),
                             example("cuda", "train_step_ms", 10.0)])
    assert set(found) == {"inference_ms", "train_step_ms"}
    assert found["inference_ms"]["host_us_per_kernel"] == pytest.approx(100.0)  # 5 ms / 50 launches, not the CPU's
    assert found["train_step_ms"]["rows"] == 1 and found["train_step_ms"]["batch_max"] == 8


def test_anchor_is_the_largest_power_of_two_that_fits_and_the_labels_measured():
    profiles = {"train_step_ms": {"batch_max": 512}, "inference_ms": {"batch_max": 1024}}
    assert launch.anchor_batch(1, 300, profiles) == 256
    assert launch.anchor_batch(8, 4096, profiles) == 512  # never beyond the labeled batches
    assert launch.anchor_batch(64, 40, profiles) == 32  # 64 does not fit: moved up from 32
    assert launch.anchor_batch(1, 0, profiles) == 1  # batch 1 does not fit: the answer as predicted


def test_the_anchor_fits_attention_as_the_labels_ran_it():
    """A predictor whose training labels ran PyTorch 1 reads its anchor's fit with eager attention;
    one that says nothing (or ran PyTorch 2), fused."""
    def manifest(run):
        return SimpleNamespace(network=SimpleNamespace(run=run) if run is not None else None)
    assert launch.labels_fused_attention(manifest({"train_step_ms": {"torch2": 0, "compiled": 0}})) is False
    assert launch.labels_fused_attention(manifest({"train_step_ms": {"torch2": 1, "compiled": 0}})) is True
    assert launch.labels_fused_attention(manifest({"inference_ms": {"torch2": 0, "compiled": 0}})) is True
    assert launch.labels_fused_attention(manifest(None)) is True


def test_step_host_us_shares_the_profiles_training_figure_as_the_defaults_share_theirs():
    d = launch.HOST_US
    train = 2 * (d["forward"] + d["backward"] + d["autocast"])  # twice the defaults' host (AMP labels)
    got = launch.step_host_us({"train_step_ms": {"host_us_per_kernel": train},
                               "inference_ms": {"host_us_per_kernel": 20.0}})
    assert got == pytest.approx({"inference": 20.0, "forward": 2 * d["forward"], "backward": 2 * d["backward"],
                                 "autocast": 2 * d["autocast"], "recompute": 2 * d["recompute"]})
    assert got["forward"] + got["backward"] + got["autocast"] == pytest.approx(train)  # the profile's figure, whole
    assert launch.step_host_us({}) == launch.HOST_US
