"""A setting no label holds: the answer in a held setting times the step model's ratio."""
import pytest

import onnx_builders as B
from trappm_ray import devices
from trappm_ray.graph.featurize import featurize
from trappm_ray.model.compositions import SettingMove
from trappm_ray.model.launch import step_host_us
from trappm_ray.model.manifest import Device, Manifest
from trappm_ray.physics.step_model import DEVICE_SCALE, device_scale, step_time

H100 = devices.get("h100-sxm5-80gb")
HOST = {"train_step_ms": {"host_us_per_kernel": 300.0}, "inference_ms": {"host_us_per_kernel": 100.0}}


class _Fixed:
    """An estimator whose labels hold fp32 + SGD with momentum only and answers ``ms`` for every graph."""

    def __init__(self, ms: float):
        self.ms = ms
        self.manifest = Manifest(name="fixed", kind="spec", feature_set="v2", targets=("train_step_ms",),
                                 device=Device(slug="h100", name="h100-sxm5-80gb", kind="cuda"),
                                 options={"precision": ["fp32"], "optimizer": ["sgd-momentum"]}, launch=HOST)
        self.targets = self.manifest.targets

    def check(self, setting):
        pass

    def predict_graphs(self, graphs, settings):
        return [{"train_step_ms": self.ms, "train_step_ms_low": self.ms / 2, "train_step_ms_high": self.ms * 2}
                for _ in graphs]


@pytest.mark.parametrize("batch", [4, 4096])
def test_a_setting_move_is_the_step_models_ratio_at_the_batch_with_the_predictors_host(batch):
    g = featurize(B.residual_chain(blocks=8, d=1024), batch_size=batch)
    base, asked = {"precision": "fp32", "optimizer": "sgd-momentum"}, {"precision": "tf32", "optimizer": "sgd-momentum"}
    move = SettingMove(_Fixed(40.0), H100)
    assert move.base(asked) == base
    row = move.predict_graphs([g], [asked])[0]
    host = step_host_us(HOST)  # the predictor's own host figures
    assert host["forward"] + host["backward"] + host["autocast"] == pytest.approx(300.0) and host["inference"] == 100.0
    # both settings on the device the answer reads: kernel times scaled so the held one reads 40 ms
    held = step_time(g, H100, base, "train", host)
    scale = device_scale(held, 40.0)
    assert held.with_device_scale(scale) == pytest.approx(40.0, rel=1e-6) or scale in DEVICE_SCALE
    ratio = step_time(g, H100, asked, "train", host).with_device_scale(scale) / held.with_device_scale(scale)
    assert row["train_step_ms"] == pytest.approx(40.0 * ratio)
    assert row["train_step_ms_high"] / row["train_step_ms_low"] == pytest.approx(4.0)  # the band moves along
    # TF32 only pays where the GPU, not the host, sets the step
    assert (ratio < 0.5) == (batch == 4096)
    assert move.predict_graphs([g], [base])[0]["train_step_ms"] == 40.0  # a held setting is not moved
