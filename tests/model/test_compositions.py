"""A setting no label holds is moved by the step model with the GPU's efficiency, not the host's."""
import pytest

import onnx_builders as B
from trappm_ray import devices
from trappm_ray.graph.featurize import featurize
from trappm_ray.model.compositions import SettingMove
from trappm_ray.model.manifest import Device, Manifest
from trappm_ray.physics.step_model import device_scale, moved_ratio, step_time

H100 = devices.get("h100-sxm5-80gb")


class _Fixed:
    """An estimator whose labels hold fp32 + SGD with momentum only and answers ``ms`` for every graph."""

    def __init__(self, ms: float):
        self.ms = ms
        self.manifest = Manifest(name="fixed", kind="spec", feature_set="v2", targets=("train_step_ms",),
                                 device=Device(slug="h100", name="h100-sxm5-80gb", kind="cuda"),
                                 options={"precision": ["fp32"], "optimizer": ["sgd-momentum"]})
        self.targets = self.manifest.targets

    def check(self, setting):
        pass

    def predict_graphs(self, graphs, settings):
        return [{"train_step_ms": self.ms, "train_step_ms_low": self.ms / 2, "train_step_ms_high": self.ms * 2}
                for _ in graphs]


@pytest.mark.parametrize("batch", [4, 4096])
def test_a_setting_move_keeps_the_answers_kernel_scale_and_leaves_the_host_alone(batch):
    g = featurize(B.residual_chain(blocks=8, d=1024), batch_size=batch)
    base, asked = {"precision": "fp32", "optimizer": "sgd-momentum"}, {"precision": "tf32", "optimizer": "sgd-momentum"}
    was = step_time(g, H100, base, "train")
    answer = was.total_ms * 1.7  # the learned answer reads the GPU 1.7x slower than the step model
    row = SettingMove(_Fixed(answer), H100).predict_graphs([g], [asked])[0]
    scale = device_scale(was, answer, (1e-3, 1e3))
    expected = step_time(g, H100, asked, "train").with_device_scale(scale)
    assert row["train_step_ms"] == pytest.approx(expected, rel=1e-6)
    assert row["train_step_ms_high"] / row["train_step_ms_low"] == pytest.approx(4.0)  # the band moves along
    # where the host's issue time shows, the answer (which reads the GPU slower than the step
    # model) leaves more of the step to the GPU, so TF32 gains more than the plain ratio says
    plain = step_time(g, H100, asked, "train").total_ms / was.total_ms
    if batch == 4096:
        assert row["train_step_ms"] / answer == pytest.approx(plain, rel=0.01) and plain < 0.25
    else:
        assert row["train_step_ms"] / answer < plain - 0.2
    assert moved_ratio(was, was, answer) == pytest.approx(1.0)  # no move, no change
