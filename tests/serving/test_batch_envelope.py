"""Batch consistency: ``trappm_ray.serving.batch_envelope`` and its use by the API."""
from __future__ import annotations

import pytest

import numpy as np

from trappm_ray import devices
from trappm_ray.graph.featurize import featurize
from trappm_ray.model import launch
from trappm_ray.physics.step_model import Setting, StepEstimate, step_time
from trappm_ray.serving import api
from trappm_ray.serving import batch_envelope as E

SAMPLE = "data/sample/onnx/resnet10t@64.onnx"


def test_ladder_climbs_to_the_predictors_top_and_gpus_take_the_step_model():
    assert E.ladder(1, 4) == [2, 4] and E.ladder(3, 4) == [6] and E.ladder(4, 4) == []
    assert E.ladder(1, 0) == [] and E.ladder(1, 1) == []
    # the top is fitted: the lower quartile of a CPU predictor's labels' batches, none on a GPU
    assert launch.envelope_top([1, 4, 4, 8, 8, 16, 24, 48], "cpu") == 4
    assert launch.envelope_top([1] * 10, "cpu") == 1 and launch.envelope_top([1, 64, 256], "cuda") == 0


def test_hold_clips_from_the_top_down_and_moves_the_interval_along():
    row = {"train_step_ms": 30.0, "train_step_ms_std": 3.0, "train_step_ms_low": 24.0,
           "train_step_ms_high": 36.0, "train_step_ms_floor": 1.0, "inference_ms": 2.0,
           "inference_ms_std": 0.1}
    above = [{"train_step_ms": 6.0, "inference_ms": 10.0}, {"train_step_ms": 20.0, "inference_ms": 12.0}]
    changed = E.hold(row, above)
    # 2b is lifted to 20 / 2 = 10, so b may cost at most 10; inference at b at least 10 / 2
    assert row["train_step_ms"] == pytest.approx(10.0)
    assert row["train_step_ms_std"] == pytest.approx(1.0) and row["train_step_ms_low"] == pytest.approx(8.0)
    assert row["train_step_ms_high"] == pytest.approx(12.0) and row["train_step_ms_floor"] == 1.0
    assert row["inference_ms"] == pytest.approx(5.0) and row["inference_ms_std"] == pytest.approx(0.25)
    assert changed == {"train_step_ms": (30.0, pytest.approx(10.0)), "inference_ms": (2.0, pytest.approx(5.0))}
    assert len(E.notes(changed, 1, 4)) == 2 and "batches 1..4" in E.notes(changed, 1, 4)[0]


def test_hold_leaves_consistent_rows_and_targets_missing_above():
    row = {"train_step_ms": 8.0, "train_memory_mb": 900.0}
    assert E.hold(row, [{"train_step_ms": 10.0}]) == {} and row == {"train_step_ms": 8.0, "train_memory_mb": 900.0}
    assert E.hold(dict(row), []) == {}


def _step(host_us: float, device_us: list[float]) -> StepEstimate:
    """A step of len(device_us) kernels, each issued after host_us of host time."""
    dev = np.asarray(device_us, float)
    return StepEstimate.of(np.full(len(dev), host_us), dev, np.zeros(len(dev)), np.zeros(len(dev)),
                           (len(dev), 0, 0), 1.0)


def test_moved_scales_the_gpus_kernels_to_the_anchors_answer_and_keeps_the_host():
    # batch 64: 10 kernels of 2 ms (device-bound, 20 ms); batch 1: 10 kernels of 0.1 ms behind
    # 10 x 0.5 ms of host time (host-bound, 5.1 ms)
    steps = {64: _step(500.0, [2000.0] * 10), 1: _step(500.0, [100.0] * 10)}
    anchor = {"train_step_ms": 40.0, "train_step_ms_low": 32.0, "train_step_ms_high": 80.0,
              "train_step_ms_floor": 20.0, "train_step_ms_measured_batch": 64, "train_power_w": 300.0}
    row, notes = E.moved(anchor, 1, 64, lambda b, t: steps[b], {"train_step_ms": 0.5})
    # the anchor's 40 ms is the GPU's kernels x ~2; at batch 1 that leaves the host's 5 ms + the last kernel
    assert row["train_step_ms"] == pytest.approx(5.0 + 0.2, rel=0.02)
    assert row["train_step_ms_low"] == pytest.approx(row["train_step_ms"] * 0.8)  # the anchor's relative band
    assert row["train_step_ms_high"] == pytest.approx(row["train_step_ms"] * 2.0)
    # the anchor's floor is not the batch's, nor are targets the step model does not move
    assert set(row) == {"train_step_ms", "train_step_ms_low", "train_step_ms_high", "train_step_ms_measured_batch",
                        "train_step_ms_anchor", "train_step_ms_device_scale"}
    assert len(notes) == 1 and "batch 64" in notes[0] and "x 1.98" in notes[0]  # (40 - 0.5) / 20 = 1.975
    assert row["train_step_ms_device_scale"] == pytest.approx(1.975)  # kept for a setting move after it
    floored, _ = E.moved(anchor, 1, 64, lambda b, t: steps[b], {"train_step_ms": 9.0})
    assert floored["train_step_ms"] == 9.0  # never below the floor
    # an anchor answer 100x the step model: the correction stops at its bound
    absurd, notes = E.moved({"train_step_ms": 2000.0}, 1, 64, lambda b, t: steps[b], {})
    assert absurd["train_step_ms"] == pytest.approx(steps[1].with_device_scale(E.DEVICE_SCALE[1]))
    assert "the most a learned answer may move it" in notes[0]
    # a graph of no work (its anchor answer 0): the floor answers, and the target is not lost
    empty, notes = E.moved({"train_step_ms": 0.0, "train_step_ms_low": 0.0}, 1, 64, lambda b, t: steps[b],
                           {"train_step_ms": 0.02})
    assert empty == {"train_step_ms": 0.02, "train_step_ms_std": 0.0} and "no work" in notes[0]


def test_moved_above_the_anchor_never_falls_below_it_nor_grows_beyond_the_batch():
    steps = {64: _step(500.0, [2000.0] * 10), 128: _step(500.0, [4000.0] * 10), 256: _step(500.0, [3000.0] * 10)}
    anchor = {"train_step_ms": 40.0, "train_step_ms_low": 32.0, "train_step_ms_high": 80.0}
    row, notes = E.moved(anchor, 128, 64, lambda b, t: steps[b], {})
    # the kernels' doubled time at the anchor's correction (~2x): twice the anchor's answer
    assert row["train_step_ms"] == pytest.approx(80.0, rel=0.02) and "batch 64" in notes[0]
    assert row["train_step_ms_high"] / row["train_step_ms"] == pytest.approx(2.0)  # the band moves along
    # a step model reading less at a larger batch (an odd kernel choice): held at the anchor's answer
    assert E.moved(anchor, 256, 64, lambda b, t: steps[b], {})[0]["train_step_ms"] == pytest.approx(40.0 * 1.5, rel=0.02)
    less = {64: steps[64], 256: _step(500.0, [100.0] * 10)}
    assert E.moved(anchor, 256, 64, lambda b, t: less[b], {})[0]["train_step_ms"] == 40.0
    more = {64: steps[64], 128: _step(500.0, [9000.0] * 10)}
    assert E.moved(anchor, 128, 64, lambda b, t: more[b], {})[0]["train_step_ms"] == 80.0  # at most in proportion


@pytest.mark.parametrize("device", ["rtx3090", "h100-sxm5-80gb", "l4"])
def test_shipped_gpu_answers_never_get_cheaper_with_batch(device):
    """The raw RTX 3090 predictor falls with batch on this model (experiments/batch_consistency.py);
    the API's answers must not, from batch 1 into the labeled batches and beyond them, on a GPU
    with labels or answered from its specs."""
    predictor = api.load_predictor(None, device, None)
    data, label = api.model_bytes(SAMPLE)
    batches = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)  # 1024, 2048: beyond the labels' batches
    answers = api.predict_many([(data, api.PredictOptions(b), label) for b in batches], predictor)
    for t in ("train_step_ms", "inference_ms"):
        series = [getattr(a, t).value for a in answers]
        assert all(a <= c * (1 + 1e-9) and c <= 2 * a * (1 + 1e-9) for a, c in zip(series, series[1:])), (t, series)
    assert any("the largest that fits this GPU" in n for n in answers[0].notes)
    single = api.predict(SAMPLE, 1, predictor=predictor)
    assert single.train_step_ms.value == pytest.approx(answers[0].train_step_ms.value)


def test_a_host_bound_step_is_the_host_time_of_its_kernels_not_a_far_extrapolation():
    """resnet10t at 64 px, batch 1: 35 graph kernels; the RTX 3090's least measured time per kernel
    is 129 us for a training step and 30 us for inference (efficientnet_cc at batch 1). Before the
    host-bound level the GNN answered 25.6 ms beside 0.43 ms (59x; the labels' per-sample ratio of a
    training step to inference: median 3.6, 99th percentile 12.4)."""
    p = api.predict(SAMPLE, 1, device="rtx3090")
    prof = api.load_predictor(None, "rtx3090", None).manifest.launch
    for t in ("train_step_ms", "inference_ms"):
        host = 35 * prof[t]["host_us_per_kernel"] / 1e3
        assert host <= getattr(p, t).value <= 2 * host, (t, getattr(p, t).value, host)
    assert p.train_step_ms.value / p.inference_ms.value < 12.4


def test_an_anchor_answer_beyond_the_bounds_is_replaced_by_the_step_model_at_the_bound():
    # batch 64 host-bound (10 kernels x 0.5 ms of host, 0.4 ms of device each): the step model
    # reads 5.4 ms, and at a quarter of the kernel times still 5.1 ms
    steps = {64: _step(500.0, [400.0] * 10), 8: _step(500.0, [100.0] * 10)}
    anchor = {"train_step_ms": 2.0, "train_step_ms_low": 1.0, "train_step_ms_high": 4.0}
    bound = steps[64].with_device_scale(E.DEVICE_SCALE[0])
    # at the anchor itself: the step model at the bound, the band moved along
    row, notes = E.moved(anchor, 64, 64, lambda b, t: steps[b], {})
    assert row["train_step_ms"] == pytest.approx(bound) and row["train_step_ms_high"] == pytest.approx(2 * bound)
    assert len(notes) == 1 and "lies further from physics" in notes[0]
    # below it: not capped at the anchor's 2 ms, never below the host's issue of the kernels
    below, _ = E.moved(anchor, 8, 64, lambda b, t: steps[b], {})
    assert below["train_step_ms"] == pytest.approx(steps[8].with_device_scale(E.DEVICE_SCALE[0]))
    assert below["train_step_ms"] >= 5.0
    # an answer within the bounds at the anchor stands as it is: no row, no note
    assert E.moved({"train_step_ms": 6.0}, 64, 64, lambda b, t: steps[b], {}) == ({}, [])


def test_a_host_bound_step_reads_the_same_on_every_gpu_and_never_below_its_issue_time():
    """resnet10t at 64 px issues its kernels in 5.2 ms (the step model with the spec predictor's
    host figures), its kernels take 0.7 ms at batch 8 and 1.9-3.7 ms at 512 on an H100 or an
    A100. The H100's learned answer at its anchor (512) read 3.2 ms, and capped every smaller
    batch at it."""
    predictor = api.load_predictor(None, "h100-sxm5-80gb", None)
    host = launch.step_host_us(predictor.manifest.launch)
    data, _ = api.model_bytes(SAMPLE)
    for b in (8, 512):
        h100, a100 = (api.predict(SAMPLE, b, device=d) for d in ("h100-sxm5-80gb", "a100-sxm4-80gb"))
        graph = featurize(data, b)
        issue = step_time(graph, devices.get("h100-sxm5-80gb"), Setting(), "train", host).host_ms
        assert h100.train_step_ms.value >= issue * (1 - 1e-6), (b, h100.train_step_ms.value, issue)
        if b == 8:  # where both are host-bound (the A100's kernels read 1.5x the step model's at 512)
            assert h100.train_step_ms.value == pytest.approx(a100.train_step_ms.value, rel=0.05)
