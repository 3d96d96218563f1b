"""The physics power model: idle + activity from the step model, and a power limit's slowdown."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from trappm_ray import devices
from trappm_ray.graph.featurize import featurize
from trappm_ray.physics import power as W
from trappm_ray.physics.step_model import StepEstimate, step_time

SAMPLE = "data/sample/onnx/resnet10t@64.onnx"


def _step(batch: int, slug: str = "v100-pcie-32gb", precision: str = "fp32"):
    return step_time(featurize(SAMPLE, batch), devices.get(slug), {"precision": precision, "optimizer": "adam"})


def test_power_lies_between_idle_and_tdp_and_grows_as_the_gpu_gets_busier():
    spec = devices.get("v100-pcie-32gb")
    idle, tdp = W.board_power(spec)
    series = [W.step_power(_step(b), spec).power_w for b in (1, 16, 256)]
    assert all(idle < p <= tdp for p in series)
    assert series[0] < series[1] < series[2]  # host-bound at batch 1: the GPU waits, near idle
    with pytest.raises(ValueError, match="no sourced TDP"):
        W.board_power(devices.DeviceSpec(slug="x", kind="cuda", name="x"))


def test_a_limit_that_binds_caps_the_power_and_lengthens_the_step():
    spec, step = devices.get("v100-pcie-32gb"), _step(256)
    free = W.step_power(step, spec)
    capped = W.step_power(step, spec, limit_w=0.6 * free.power_w)
    assert capped.power_w == pytest.approx(0.6 * free.power_w, rel=1e-3) and capped.clock < 1.0
    assert capped.step_ms > free.step_ms and capped.energy_j() > 0
    loose = W.step_power(step, spec, limit_w=spec.tdp_w)
    assert loose.clock == 1.0 and loose.step_ms == pytest.approx(free.step_ms)
    with pytest.raises(ValueError, match="idle power"):
        W.step_power(step, spec, limit_w=10.0)


def test_fit_recovers_the_weight_that_made_the_measurements():
    truth = W.PowerModel(11.0)
    rows = [(s, devices.get(g), W.power_at(s, devices.get(g), truth, busy=busy)[0], busy)
            for g in ("v100-pcie-32gb", "p100-pcie-16gb") for b in (1, 8, 64, 256) for s in [_step(b, g)]
            for busy in (None, 0.4)]
    assert W.fit(rows).w_per_tflop == pytest.approx(11.0, rel=1e-6)


def test_a_busy_gpu_draws_in_proportion_to_its_units_and_is_held_at_its_limit():
    model = W.PowerModel(12.0)
    p100, v100, h200 = (devices.get(s) for s in ("p100-pcie-16gb", "v100-pcie-32gb", "h200-sxm-141gb"))
    assert model.busy_w(v100) / model.busy_w(p100) == pytest.approx(14 / 9.3)
    assert "9.3 fp32 TFLOP/s" in W.power_basis(model, p100) and "TDP" in W.power_basis(W.PowerModel(), p100)
    # one long kernel, no host gap: 67 TFLOP/s x 12 W is more than its 700 W allow; its units draw
    # the TDP at full clock (its boost clock is the one its busy units hold within the TDP)
    step = StepEstimate.of(np.zeros(1), np.array([1e4]), np.array([1e3]), np.ones(1), (1, 0, 0), 1.0)
    est = W.step_power(step, h200, model)
    assert est.power_w == pytest.approx(h200.tdp_w, rel=1e-3) and est.clock == 1.0
    assert model.busy_w(h200) == pytest.approx(h200.tdp_w - W.board_power(h200)[0]) and model.busy_w(h200) < 12.0 * 67
    assert "at most its TDP less idle" in W.power_basis(model, h200) and "at most" not in W.power_basis(model, p100)
    # half busy: half the units' draw above idle, not the unbounded draw's half held at the TDP
    half = StepEstimate.of(np.array([0.0, 2e4]), np.array([1e4, 0.0]), np.array([1e3, 0.0]), np.ones(2), (2, 0, 0), 1.0)
    idle = W.board_power(h200)[0]
    assert W.step_power(half, h200, model).power_w == pytest.approx(idle + 0.5 * (h200.tdp_w - idle), rel=1e-3)
    unfitted = W.step_power(_step(256), v100, W.PowerModel())  # a busy GPU draws its TDP
    assert unfitted.power_w <= v100.tdp_w and unfitted.power_w > 0.8 * v100.tdp_w


def test_a_gpu_waiting_on_its_data_loader_draws_idle_power_for_that_share():
    spec, step = devices.get("v100-pcie-32gb"), _step(256, "v100-pcie-32gb")
    idle, _ = W.board_power(spec)
    busy = W.step_power(step, spec).power_w
    half = W.step_power(step, spec, busy=0.5).power_w
    assert half - idle == pytest.approx(0.5 * (busy - idle), rel=0.02)


def test_the_shipped_weights_carry_their_provenance_and_error(tmp_path):
    shipped = json.loads(W.FITTED.read_text())
    assert "zeus" in shipped["source"] and shipped["command"] == "python jobs/evaluate_power.py"
    model = W.PowerModel.load()
    assert list(model.band) == shipped["band"] and model.w_per_tflop == shipped["w_per_tflop"] > 0
    assert model.band[0] < 1 < model.band[1]
    assert W.PowerModel.load(tmp_path / "none.json") == W.PowerModel()


def test_a_sourced_lowest_power_limit_bounds_what_a_gpu_accepts():
    v100 = devices.get("v100-pcie-32gb")
    assert v100.min_power_limit_w == 100  # the lowest limit Zeus set on it
    assert W.limit_refusal(v100, 99) and W.limit_refusal(v100, 100) is None and W.limit_refusal(v100, 251)
    l40 = devices.get("l40")  # no sourced lowest limit: the stated share of TDP
    assert l40.min_power_limit_w is None and "about" in W.limit_refusal(l40, 0.2 * l40.tdp_w)
    h100 = devices.get("h100-sxm5-80gb")  # nvidia-smi's Min / Max Power Limit of an H100 SXM5
    assert (h100.min_power_limit_w, h100.max_power_limit_w) == (200, 700) and W.limit_refusal(h100, 199)


def test_a_highest_limit_above_the_tdp_is_accepted_and_answered_as_the_tdp():
    spec = dataclasses.replace(devices.get("v100-pcie-32gb"), max_power_limit_w=300.0)
    assert W.limit_refusal(spec, 300) is None and "300 W: its highest settable" in W.limit_refusal(spec, 301)
    step, model = _step(256), W.PowerModel(12.0)
    above, at_tdp = W.step_power(step, spec, model, 300.0), W.step_power(step, spec, model)
    assert above.limit_w == 300
    assert (above.power_w, above.step_ms, above.clock) == (at_tdp.power_w, at_tdp.step_ms, at_tdp.clock)


def test_fit_voltage_floor_recovers_the_floor_that_made_the_slowdowns():
    truth, spec = W.PowerModel(12.0, voltage_floor=0.8), devices.get("v100-pcie-32gb")
    rows = []
    for b in (64, 256):
        step = _step(b)
        top = W.step_power(step, spec, truth)
        for limit in (100.0, 125.0, 150.0, 200.0):
            rows.append((step, spec, limit, spec.tdp_w, W.step_power(step, spec, truth, limit).step_ms / top.step_ms))
    fitted = W.fit_voltage_floor(W.PowerModel(12.0), rows)
    assert fitted.voltage_floor == pytest.approx(0.8, abs=0.02) and fitted.w_per_tflop == 12.0
    assert W.fit_voltage_floor(truth, []) == truth


def test_below_the_voltage_floor_a_deeper_cap_costs_more_time_than_the_cubic_law_says():
    spec, step = devices.get("v100-pcie-32gb"), _step(256)
    cubic, floored = W.PowerModel(12.0), W.PowerModel(12.0, voltage_floor=0.9)
    assert cubic.clock_factor(0.5) == pytest.approx(0.125) and floored.clock_factor(0.5) == pytest.approx(0.405)
    assert floored.clock_factor(0.95) == cubic.clock_factor(0.95)  # above the floor the voltage follows the clock
    deep = [W.step_power(step, spec, m, 100.0) for m in (cubic, floored)]
    assert deep[1].clock < deep[0].clock and deep[1].step_ms > deep[0].step_ms
    assert deep[1].power_w == pytest.approx(100.0, rel=1e-3)


def test_a_limit_lowers_the_clock_from_full_on_a_gpu_whose_units_outdraw_its_tdp():
    """An RTX 4090's 82.6 fp32 TFLOP/s x 12.85 W is 1,061 W on a 450 W board: at 300 W its clock
    falls from full by what 300 of 450 W allow, not from the 0.55 the unbounded draw would read."""
    model, spec = W.PowerModel(12.85, voltage_floor=0.9), devices.get("rtx4090")
    step = StepEstimate.of(np.zeros(1), np.array([1e4]), np.array([1e3]), np.ones(1), (1, 0, 0), 1.0)
    free, capped = W.step_power(step, spec, model), W.step_power(step, spec, model, 300.0)
    idle, tdp = W.board_power(spec)
    assert free.clock == 1.0 and free.power_w == pytest.approx(tdp)
    assert model.clock_factor(capped.clock) == pytest.approx((300.0 - idle) / (tdp - idle), rel=1e-3)
    assert 0.7 < capped.clock < 0.8 and capped.power_w == pytest.approx(300.0, rel=1e-3)
    assert capped.step_ms / free.step_ms == pytest.approx(1 / capped.clock, rel=1e-3)  # compute-bound
