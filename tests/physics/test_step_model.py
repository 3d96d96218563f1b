"""The physics step model: queue of host issue and device kernels, fill, settings."""
from __future__ import annotations

import numpy as np
import pytest

from trappm_ray import devices
from trappm_ray.graph.featurize import featurize
from trappm_ray.physics import step_model as S
from trappm_ray.physics.roofline import roofline
from tests import onnx_builders as ob

SAMPLE = "data/sample/onnx/resnet10t@64.onnx"


def test_the_queue_is_the_larger_of_host_and_device_where_one_dominates():
    host, fast, slow = np.full(10, 100.0), np.full(10, 10.0), np.full(10, 1000.0)
    assert S.queue_ms(host, fast) == pytest.approx((10 * 100 + 10) / 1e3)  # host-bound: the last kernel trails
    assert S.queue_ms(host, slow) == pytest.approx((100 + 10 * 1000) / 1e3)  # device-bound: the first waits
    assert S.queue_ms(host, np.full(10, 100.0)) >= max(host.sum(), 1000.0) / 1e3
    assert S.queue_ms(np.zeros(0), np.zeros(0)) == 0.0


def test_fill_counts_waves_of_blocks_over_the_sms():
    f = S.fill(np.array([1.0, 80 * 1.0, 81.0, 160.0]), np.array([1.0] * 4), np.array([1] * 4), 80)
    assert f == pytest.approx([1 / 80, 1.0, 81 / 160, 1.0])
    assert S.fill(np.array([5.0]), np.array([1.0]), np.array([1]), None) == pytest.approx([1.0])


def test_split_k_fills_idle_sms_and_never_slows_a_doubled_gemm():
    slots, tile = 108, 128 * 128
    # 4 output tiles of a 16,384-long reduction: 16 slices (the power of two under 108 / 4)
    assert S.split_k(np.array([64 * 1024.0]), np.array([16384.0]), tile, slots) == pytest.approx([16.0])
    # a short reduction, or tiles that fill the SMs already, are not split
    assert S.split_k(np.array([64 * 1024.0, 200 * tile]), np.array([300.0, 16384.0]), tile, slots) == pytest.approx([1, 1])
    assert S.split_k(np.array([64.0]), np.array([1e6]), tile, None) == pytest.approx([1.0])
    for k in (256.0, 1000.0, 4096.0, 65536.0):
        out = tile * np.arange(1, 400, dtype=np.float64)
        blocks = np.ceil(out / tile) * S.split_k(out, np.full(out.shape, k), tile, slots)
        share = S.fill(blocks * tile, np.full(out.shape, tile), np.ones(out.shape), slots)
        # a GEMM of twice the tiles never fills the GPU worse: its time at most doubles
        assert np.all(share[1::2] >= share[:len(share[1::2])] - 1e-12), k


@pytest.mark.parametrize("slug", ["rtx3090", "h100-sxm5-80gb", "t4", "k80"])
def test_throughput_never_falls_as_the_batch_grows_and_no_step_beats_the_roofline(slug):
    spec = devices.get(slug)
    precision = "fp32" if slug == "k80" else "amp-fp16"
    for mode in ("train", "infer"):
        prev = None
        for b in (1, 2, 4, 8, 16, 32, 64, 128, 256):
            g = featurize(SAMPLE, b)
            est = S.step_time(g, spec, {"precision": precision, "optimizer": "sgd-momentum"}, mode)
            assert est.total_ms >= roofline(g, spec, precision, mode, "sgd-momentum").total_ms
            assert est.total_ms >= max(est.host_ms, est.device_ms)
            if prev is not None:
                assert prev <= est.total_ms <= 2 * prev * (1 + 1e-9), (mode, b)
            prev = est.total_ms


def test_settings_cost_what_they_move():
    g, spec = featurize(SAMPLE, 64), devices.get("rtx3090")
    times = {o: S.step_time(g, spec, {"precision": "amp-fp16", "optimizer": o}).total_ms
             for o in ("none", "sgd", "sgd-momentum", "adam", "adamw")}
    assert times["none"] <= times["sgd"] <= times["sgd-momentum"] <= times["adam"] <= times["adamw"]
    fused = S.step_time(g, spec, S.Setting("amp-fp16", "adamw", fused_optimizer=True))
    assert fused.optimizer_ms < S.step_time(g, spec, S.Setting("amp-fp16", "adamw")).optimizer_ms
    base = S.step_time(g, spec, S.Setting("amp-fp16", "sgd-momentum"))
    again = S.step_time(g, spec, S.Setting("amp-fp16", "sgd-momentum", recompute=True))
    forward = S.step_time(g, spec, S.Setting("amp-fp16"), "infer").device_ms  # the forward alone, without the loss
    assert again.total_ms > base.total_ms and again.device_ms == pytest.approx(base.device_ms + forward)
    # each kernel of the forward run again inside the backward adds the host's recompute figure
    assert again.host_ms - base.host_ms == pytest.approx(S.launches(g, spec, "amp-fp16") * S.HOST_US["recompute"] / 1e3)
    two = S.step_time(g, spec, S.Setting("amp-fp16", "sgd-momentum", grad_accum=2))
    assert two.device_ms == pytest.approx(2 * (base.device_ms - base.optimizer_ms) + base.optimizer_ms)
    assert S.step_time(g, spec, S.Setting("fp32", "sgd-momentum")).device_ms > base.device_ms  # no tensor cores
    with pytest.raises(ValueError, match="mode"):
        S.step_time(g, spec, mode="eval")


def test_tf32_matrix_products_run_at_their_own_share_of_the_peak_and_convolutions_keep_the_tensor_share():
    h200 = devices.get("h200-sxm-141gb")
    mlp, cnn = featurize(ob.residual_chain(blocks=2, d=1024), batch_size=8192), featurize(SAMPLE, 256)

    def compute(g, op, eff):
        work, compute, *_ = S.node_terms(g, h200, "tf32", eff)
        return compute[work & np.isin(g.ops, [op])].sum()
    at_tensor_share = S.Efficiency(tf32_matmul=S.Efficiency.tensor)
    assert compute(mlp, "MatMul", S.Efficiency()) == pytest.approx(
        compute(mlp, "MatMul", at_tensor_share) * S.Efficiency.tensor / S.Efficiency.tf32_matmul)
    assert compute(cnn, "Conv", S.Efficiency()) == pytest.approx(compute(cnn, "Conv", at_tensor_share))
    # never below the FP32 units' rate: a share under theirs reads them
    floor = S.Efficiency(tf32_matmul=0.01)
    est = roofline(mlp, h200, "tf32", "infer")
    assert compute(mlp, "MatMul", floor) == pytest.approx(
        compute(mlp, "MatMul", at_tensor_share) * S.Efficiency.tensor / (S.Efficiency.vector * est.peak_vector / est.peak_tensor))


def test_autocast_adds_its_backward_host_time_per_kernel():
    g, h200 = featurize(SAMPLE, 1), devices.get("h200-sxm-141gb")
    amp, bf16 = (S.step_time(g, h200, S.Setting(p, "sgd")) for p in ("amp-bf16", "bf16"))
    assert S.launches(g, h200, "amp-bf16") == S.launches(g, h200, "bf16")
    assert amp.backward_host_ms - bf16.backward_host_ms == pytest.approx(
        S.launches(g, h200, "bf16") * S.HOST_US["autocast"] / 1e3)
    assert amp.forward_host_ms == pytest.approx(bf16.forward_host_ms)


def test_device_scale_solves_for_a_measured_step_within_its_bounds():
    g, spec = featurize(SAMPLE, 256), devices.get("rtx3090")
    est = S.step_time(g, spec)
    c = S.device_scale(est, 1.7 * est.total_ms, (0.25, 4.0))
    assert est.with_device_scale(c) == pytest.approx(1.7 * est.total_ms, rel=1e-6)
    assert S.device_scale(est, 100 * est.total_ms, (0.25, 4.0)) == 4.0
    assert S.device_scale(est, 0.0, (0.25, 4.0)) == 0.25


@pytest.mark.parametrize("d, batch", [(32, 64), (100, 3), (1024, 37)])
def test_autocast_copies_add_no_batchnorm_kernels(d, batch):
    # a BatchNorm kernel is the roofline's restored BatchNorm, never what is left after
    # subtracting the other terms of a node's time (float residues once counted as launches)
    g = featurize(ob.residual_chain(blocks=4, d=d, norm=True), batch_size=batch)
    for precision in ("amp-fp16", "fp32"):
        work, _, _, bn, cast, _ = S.node_terms(g, devices.get("rtx3090"), precision)
        assert not bn.any() and S.launches(g, devices.get("rtx3090"), precision) == work.sum()
        assert cast[work].any() == precision.startswith("amp")
    cnn = featurize(SAMPLE, 8)  # its eval-mode export folded BatchNorms into the Convs
    work, _, _, bn, _, _ = S.node_terms(cnn, devices.get("rtx3090"), "amp-fp16")
    assert S.launches(cnn, devices.get("rtx3090"), "amp-fp16") == work.sum() + (bn[work] > 0).sum() > work.sum()
