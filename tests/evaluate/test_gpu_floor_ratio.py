"""Reference transfer on real featurized graphs and real roofline floors of two spec-table GPUs."""
from __future__ import annotations

import numpy as np
import pytest

import onnx_builders as B
from trappm_ray import devices
from trappm_ray.evaluate.gpu_floor_ratio import reference_device, transfer_predict
from trappm_ray.graph.featurize import featurize
from trappm_ray.graph.rows import graph_to_row, row_to_graph
from trappm_ray.model import floor_ratio as transfer
from trappm_ray.model.device_features import SETTING_COLS, feature_vector, roofline_features, settings


def examples(efficiency: dict[str, float]) -> tuple[list[dict], dict]:
    """Tiny-CNN inference rows on each device, measured = ``efficiency[device]`` x its floor;
    every (architecture name, batch) is one graph of the index."""
    model = B.to_bytes(B.cnn_model())
    index, ex = {}, []
    s = settings(False, "amp-fp16")
    for a in range(10):
        for b in (8, 32, 64):
            row = graph_to_row(featurize(model, batch_size=b), arch=f"net{a}", resolution=8, batch_size=b)
            index[(f"net{a}", 8, b)] = row
            for slug, eff in efficiency.items():
                spec = devices.get(slug)
                floor, feats = roofline_features(row_to_graph(row), spec, "amp-fp16", "infer", "none", s)
                ex.append({"spec": slug, "kind": spec.kind, "arch": f"net{a}", "family": "net",
                           "measured": eff * floor * (1 + 0.01 * a), "floor": floor,
                           "rkey": (f"net{a}", 8, b, slug, "amp-fp16", "infer", "none", 1.0, 0.0),
                           "x": feature_vector(feats, spec, s), "setting": tuple(s[c] for c in SETTING_COLS)})
    return ex, index


def test_transfer_carries_the_reference_overhead_through_the_floor_ratio(monkeypatch):
    monkeypatch.setattr(transfer, "LEAST_HOST_US_PER_KERNEL", {"train_step_ms": 0.0, "inference_ms": 0.0})  # the tiny CNN's floors are microseconds
    ex, index = examples({"rtx3090": 3.0, "rtx4090": 3.0, "rtx2080ti": 5.0})
    spec = np.array([e["spec"] for e in ex])
    test, rest = np.where(spec == "rtx4090")[0], np.where(spec != "rtx4090")[0]
    # the same kind's largest device: a tie between 3090 and 2080 Ti goes to the first name
    assert reference_device(ex, "rtx4090", rest) == "rtx2080ti"
    rest = np.where(spec == "rtx3090")[0]
    out = transfer_predict(ex, "rtx4090", rest, test, index, seed=0)
    assert out["reference"] == "rtx3090" and len(out["rows"]) == len(test)
    meas = np.array([ex[i]["measured"] for i in out["rows"]])
    assert np.mean(np.abs(out["pred"] / meas - 1)) < 0.05  # 3x the floor on both devices
    assert np.all(out["pred"] >= np.array([ex[i]["floor"] for i in out["rows"]]))


def test_a_gnn_reference_transfers_too(monkeypatch):
    """The shipped GPU recipe as the reference regressor: it sees the test graphs on the
    reference device (their node features there), and its answers are moved the same way."""
    monkeypatch.setattr(transfer, "LEAST_HOST_US_PER_KERNEL", {"train_step_ms": 0.0, "inference_ms": 0.0})
    ex, index = examples({"rtx3090": 3.0, "rtx4090": 3.0})
    spec = np.array([e["spec"] for e in ex])
    out = transfer_predict(ex, "rtx4090", np.where(spec == "rtx3090")[0], np.where(spec == "rtx4090")[0],
                           index, seed=0, model="gnn", folds=2)
    meas = np.array([ex[i]["measured"] for i in out["rows"]])
    assert out["reference"] == "rtx3090" and len(meas) == 30
    assert np.all(np.isfinite(out["pred"])) and np.mean(np.abs(out["pred"] / meas - 1)) < 0.5
    assert np.all(out["lo"] <= out["pred"]) and np.all(out["pred"] <= out["hi"])


def test_without_cross_fitting_the_reference_is_fitted_once_on_all_its_rows(monkeypatch):
    import trappm_ray.evaluate.gpu_floor_ratio as T

    fits = []
    real = T.reference_fitter

    def recording(*args, **kwargs):
        fit = real(*args, **kwargs)
        return lambda train, val: fits.append((set(train), set(val))) or fit(train, val)

    monkeypatch.setattr(T, "reference_fitter", recording)
    ex, index = examples({"rtx3090": 3.0, "rtx4090": 3.0})
    spec = np.array([e["spec"] for e in ex])
    rest, test = np.where(spec == "rtx3090")[0], np.where(spec == "rtx4090")[0]
    cross = transfer_predict(ex, "rtx4090", rest, test, index, seed=0)
    assert len(fits) == 5 and all(len(a | b) < len(rest) for a, b in fits)  # an architecture fold out each
    fits.clear()
    seen = transfer_predict(ex, "rtx4090", rest, test, index, seed=0, cross_fit=False)
    assert len(fits) == 1 and fits[0][0] | fits[0][1] == set(range(len(rest)))
    assert np.array_equal(seen["rows"], cross["rows"])
    meas = np.array([ex[i]["measured"] for i in seen["rows"]])
    assert np.mean(np.abs(seen["pred"] / meas - 1)) < 0.15  # the architectures' graphs are identical
    assert np.all(seen["lo"] <= seen["pred"]) and np.all(seen["pred"] <= seen["hi"])


def test_a_measured_reference_moves_each_architectures_own_time(monkeypatch):
    """Each architecture runs 1 + 0.01 a above its floor on both devices: the reference's
    measurement of the same architecture (at the nearest batch where the exact one is missing)
    moved by the floor ratio recovers it, which no regressor on identical graphs can."""
    from trappm_ray.evaluate.gpu_floor_ratio import measured_transfer_predict

    monkeypatch.setattr(transfer, "LEAST_HOST_US_PER_KERNEL", {"train_step_ms": 0.0, "inference_ms": 0.0})
    ex, index = examples({"rtx3090": 3.0, "rtx4090": 3.0})
    spec = np.array([e["spec"] for e in ex])
    rest = np.array([i for i in np.where(spec == "rtx3090")[0] if ex[i]["rkey"][2] != 32], int)  # no batch 32
    test = np.where(spec == "rtx4090")[0]
    out = measured_transfer_predict(ex, "rtx4090", rest, test, index)
    assert out["reference"] == "rtx3090" and len(out["rows"]) == len(test)
    meas = np.array([ex[i]["measured"] for i in out["rows"]])
    assert np.max(np.abs(out["pred"] / meas - 1)) < 0.05
    exact = np.array([ex[i]["rkey"][2] != 32 for i in out["rows"]])
    assert np.allclose(out["pred"][exact], meas[exact], rtol=1e-9)  # the same key: its own time, moved
    assert np.all(out["lo"] <= out["pred"]) and np.all(out["pred"] <= out["hi"])
    assert measured_transfer_predict(ex, "rtx4090", rest[:0], test, index) is None


def test_rows_in_settings_the_reference_never_ran_are_not_predicted():
    ex, index = examples({"rtx3090": 3.0, "rtx4090": 3.0})
    spec = np.array([e["spec"] for e in ex])
    for e in ex:
        if e["spec"] == "rtx4090":
            e["setting"] = (0.0, 1.0, 0.0, 1.0, 1.0, 0.0)  # channels-last: not among the 3090's
    out = transfer_predict(ex, "rtx4090", np.where(spec == "rtx3090")[0], np.where(spec == "rtx4090")[0],
                           index, seed=0)
    assert out is None


def test_a_faster_device_never_beats_the_host_launch_time():
    # 1,000 kernels x 10 us: a 100 ms reference step (floor 50 ms) on a device with a 1 ms floor
    assert transfer.transfer_ms(100.0, 1.0, 50.0, 1000, "infer") == pytest.approx(10.0)
    assert transfer.transfer_ms(100.0, 1.0, 50.0, 1000, "train") == pytest.approx(30.0)
    assert transfer.transfer_ms(5.0, 1.0, 50.0, 1000, "infer") == pytest.approx(5.0)  # capped: the reference
    assert transfer.transfer_ms(100.0, 200.0, 50.0, 1000, "infer") == pytest.approx(400.0)  # slower device


def test_anchored_transfer_takes_the_measurement_where_the_reference_has_one():
    from trappm_ray.evaluate.gpu_floor_ratio import anchored_transfer

    moved = {"reference": "rtx3090", "rows": np.array([4, 7, 9]), **{k: np.array([1.0, 2.0, 3.0]) for k in
                                                                      ("raw", "pred", "lo", "hi")}}
    measured = {"reference": "rtx3090", "rows": np.array([9, 4]), **{k: np.array([30.0, 10.0]) for k in
                                                                      ("raw", "pred", "lo", "hi")}}
    out = anchored_transfer(moved, measured)
    assert list(out["rows"]) == [4, 7, 9] and list(out["pred"]) == [10.0, 2.0, 30.0]
    assert list(anchored_transfer(moved, None)["hi"]) == [1.0, 2.0, 3.0]
