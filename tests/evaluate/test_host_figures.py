import pytest

from trappm_ray import devices
from trappm_ray.evaluate.host_figures import across_models, host_figures, markdown
from trappm_ray.graph.featurize import featurize
from trappm_ray.physics.step_model import HOST_US, Setting, launches

H200 = devices.get("h200-sxm-141gb")


@pytest.fixture(scope="module")
def graph():
    return featurize("data/sample/onnx/resnet10t@64.onnx", 1)


def setting(r):
    return Setting(precision=r["precision"], optimizer=r["optimizer"], recompute=r["recompute"] != "none",
                   grad_accum=r["grad_accum"])


def row(**kw):
    return {"arch": "resnet10t", "precision": "amp-bf16", "optimizer": "adamw", "recompute": "none", "grad_accum": 1,
            "forward_ms": 5.0, "backward_ms": 7.0, "optimizer_ms": 1.0, "inference_ms": 3.0} | kw


def test_a_host_bound_phase_reads_as_the_hosts_time_per_kernel(graph):
    k = launches(graph, H200, "amp-bf16")
    (fig,) = host_figures([(row(), graph), (row(forward_ms=7.0, backward_ms=9.0), graph)], H200, setting)
    assert fig.kernels == k and fig.rows == 2 and fig.inference_rows == 2
    assert fig.forward_us == pytest.approx(6.0e3 / k) and fig.backward_us == pytest.approx(8.0e3 / k)
    assert fig.inference_us == pytest.approx(3.0e3 / k) and fig.optimizer_ms == 1.0
    assert across_models([fig])["forward"] == fig.forward_us
    table = "\n".join(markdown([fig]))
    assert f"| {HOST_US['forward']:.0f} | {HOST_US['backward']:.0f} | | | {HOST_US['inference']:.0f} |" in table


def test_rows_the_gpu_sets_or_that_run_more_than_one_forward_are_left_out(graph):
    device_bound = row(forward_ms=1e-4, backward_ms=1e-4, inference_ms=1e-4)  # shorter than its own kernels
    checkpointed, accumulated = row(recompute="full"), row(grad_accum=4)
    assert host_figures([(device_bound, graph), (checkpointed, graph), (accumulated, graph)], H200, setting) == []
