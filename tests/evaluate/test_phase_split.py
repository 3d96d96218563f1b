import pytest

from trappm_ray import devices
from trappm_ray.evaluate.phase_split import markdown, phase_splits
from trappm_ray.graph.featurize import featurize
from trappm_ray.physics.step_model import Setting, step_time

H200 = devices.get("h200-sxm-141gb")


@pytest.fixture(scope="module")
def graph():
    # at a large batch the step model calls the forward and backward device-bound
    return featurize("data/sample/onnx/resnet10t@64.onnx", 8192)


def setting(r):
    return Setting(precision=r["precision"], optimizer=r["optimizer"], recompute=r["recompute"] != "none",
                   grad_accum=r["grad_accum"])


def row(**kw):
    return {"arch": "resnet10t", "precision": "amp-bf16", "optimizer": "adamw", "memory_format": "nchw",
            "recompute": "none", "grad_accum": 1, "batch_size": 8192, "forward_ms": 1.0, "backward_ms": 1.0,
            "optimizer_ms": 1.0} | kw


def test_a_device_bound_phase_reads_measured_over_modelled(graph):
    step = step_time(graph, H200, setting(row()))
    assert step.forward_ms >= step.forward_host_ms and step.backward_ms >= step.backward_host_ms
    r = row(forward_ms=2 * step.forward_ms, backward_ms=3 * step.backward_ms)
    (split,) = phase_splits([(r, graph), (r, graph)], H200, setting)
    assert split.rows == 2 and split.setting == "amp-bf16/nchw" and split.batches == (8192, 8192)
    assert split.forward == pytest.approx(2.0) and split.backward == pytest.approx(3.0)
    assert "| resnet10t | amp-bf16/nchw | 2 | 8192-8192 | 2.00 | 3.00 |" in "\n".join(markdown([split]))


def test_host_bound_phases_and_passes_run_twice_are_left_out():
    small = featurize("data/sample/onnx/resnet10t@64.onnx", 1)  # a few us of kernels under tens of us of issue
    assert phase_splits([(row(batch_size=1), small), (row(recompute="full"), small), (row(grad_accum=4), small)],
                        H200, setting) == []
