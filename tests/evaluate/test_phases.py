import pytest

from trappm_ray import devices
from trappm_ray.evaluate.phases import across_models, host_table, phase_readings, rate_table
from trappm_ray.graph.featurize import featurize
from trappm_ray.physics.step_model import HOST_US, Setting, launches, step_time

H200 = devices.get("h200-sxm-141gb")


@pytest.fixture(scope="module")
def small():
    return featurize("data/sample/onnx/resnet10t@64.onnx", 1)  # a few us of kernels under tens of us of issue


@pytest.fixture(scope="module")
def large():
    return featurize("data/sample/onnx/resnet10t@64.onnx", 8192)  # kernels longer than their issue


def setting(r):
    return Setting(precision=r["precision"], optimizer=r["optimizer"], recompute=r["recompute"] != "none",
                   grad_accum=r["grad_accum"])


def row(**kw):
    return {"arch": "resnet10t", "precision": "amp-bf16", "optimizer": "adamw", "memory_format": "nchw",
            "recompute": "none", "grad_accum": 1, "batch_size": 1, "forward_ms": 5.0, "backward_ms": 7.0,
            "optimizer_ms": 1.0, "inference_ms": 3.0} | kw


def test_a_host_bound_phase_reads_as_the_hosts_time_per_kernel(small):
    k = launches(small, H200, "amp-bf16")
    (fig,), _ = phase_readings([(row(), small), (row(forward_ms=7.0, backward_ms=9.0), small)], H200, setting)
    assert fig.kernels == k and fig.rows == 2 and fig.inference_rows == 2
    assert fig.forward_us == pytest.approx(6.0e3 / k) and fig.backward_us == pytest.approx(8.0e3 / k)
    assert fig.inference_us == pytest.approx(3.0e3 / k) and fig.optimizer_ms == 1.0
    assert across_models([fig])["forward"] == fig.forward_us
    table = "\n".join(host_table([fig]))
    assert (f"| {HOST_US['forward']:.0f} | {HOST_US['backward']:.0f} (+{HOST_US['autocast']:.0f} under autocast) "
            f"| | | {HOST_US['inference']:.0f} |") in table


def test_a_device_bound_phase_reads_measured_over_modelled(large):
    step = step_time(large, H200, setting(row()))
    assert step.forward_ms >= step.forward_host_ms and step.backward_ms >= step.backward_host_ms
    r = row(batch_size=8192, forward_ms=2 * step.forward_ms, backward_ms=3 * step.backward_ms, inference_ms=None)
    figures, (split,) = phase_readings([(r, large), (r, large)], H200, setting)
    assert figures == []  # the GPU, not the host, set these phases
    assert split.rows == 2 and split.setting == "amp-bf16/nchw" and split.batches == (8192, 8192)
    assert split.forward == pytest.approx(2.0) and split.backward == pytest.approx(3.0)
    assert "| resnet10t | amp-bf16/nchw | 2 | 8192-8192 | 2.00 | 3.00 |" in "\n".join(rate_table([split]))


def test_rows_that_run_more_than_one_forward_are_left_out(small):
    assert phase_readings([(row(recompute="full"), small), (row(grad_accum=4), small)], H200, setting) == ([], [])


def test_a_phase_neither_side_sets_reads_nothing_and_a_host_bound_one_no_rate(small):
    device_bound = row(forward_ms=1e-4, backward_ms=1e-4, inference_ms=1e-4)  # shorter than its own kernels
    assert phase_readings([(device_bound, small)], H200, setting) == ([], [])  # neither: no reading
    figures, splits = phase_readings([(row(), small)], H200, setting)
    assert len(figures) == 1 and splits == []
