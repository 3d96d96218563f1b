"""Training the spec-based predictor on a tiny hand-built table: LODO, choice, intervals, files."""
import json
from pathlib import Path

import numpy as np
import pytest

from spec_builders import SPECS, tiny_table, train_tiny
from trappm_ray.model.intervals import weighted_quantiles
from trappm_ray.train import spec_predictor
from trappm_ray.train.spec_predictor import SpecTrainConfig, device_weights, metrics

LABELS = str(Path(__file__).resolve().parents[2] / "data" / "labels")  # the committed label store


def test_trains_writes_json_boosters_and_a_manifest(tmp_path):
    out = tmp_path / "gpu-spec"
    summary = train_tiny(str(out))
    m = json.loads((out / "manifest.json").read_text())
    assert m["kind"] == "gpu-spec" and summary["variant"] in ("full", "physics")
    assert set(m["data"]["rows_per_device"]) == set(SPECS) and m["data"]["rows"] == len(tiny_table()["spec"])
    assert sorted(m["targets"]) == ["inference_ms", "train_step_ms"]
    assert m["command"].startswith("python jobs/train_spec_predictor.py")
    for target in m["targets"]:
        lodo = m["boosters"]["lodo"][target]
        assert set(lodo["devices"]) == set(SPECS) and lodo["mean_device_mape"] is not None
        q = m["residual_quantiles"][target]["values"]
        assert q == sorted(q)  # quantiles of the LODO residuals, increasing with the level
    assert {"full/d2", "physics/d2", "roofline-eff"} <= set(m["boosters"]["lodo_candidates"])
    for b in m["boosters"]["files"]:  # XGBoost JSON, not a pickle
        assert json.loads((out / b["file"]).read_text())["learner"]
    assert m["domain"]["threshold"] > 0


def test_unknown_variant_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown variant"):
        train_tiny(str(tmp_path / "x"), variants=("nope",))


def test_weights_balance_devices_and_quantiles_are_weighted():
    w = device_weights(np.array(["a"] * 9 + ["b"]), 1.0)
    assert w[:9].sum() == pytest.approx(w[9]) and w.mean() == pytest.approx(1.0)
    r = np.array([0.0] * 9 + [1.0])
    assert weighted_quantiles(r, np.ones(10), (0.5,))[0] == 0.0
    assert weighted_quantiles(r, w, (0.9,))[0] > 0.5  # the lone device counts as much as the nine


def test_metrics_are_per_device_with_held_out_coverage():
    t = tiny_table()
    perfect = np.log(t["measured"] / t["base"])  # log ratios are taken against the base
    m = metrics(t, perfect, np.ones(len(perfect), bool))
    assert all(v["mape"] < 1e-6 for v in m["inference_ms"]["devices"].values())
    below = metrics(t, perfect - 5.0, np.ones(len(perfect), bool))  # clamped at the floor
    floor_ape = np.abs(t["floor"] / t["measured"] - 1) * 100
    rows = t["target"] == "inference_ms"
    assert below["inference_ms"]["pooled_mape"] == pytest.approx(floor_ape[rows].mean(), abs=0.01)


def test_the_base_is_the_host_time_of_the_kernels_where_it_exceeds_the_floor():
    from trappm_ray.model.device_features import KERNELS_COL
    from trappm_ray.model.launch import HOST_US_PER_KERNEL
    t = tiny_table()
    kernels = np.exp(t["x"][:, KERNELS_COL])
    host = kernels * np.where(t["target"] == "train_step_ms", HOST_US_PER_KERNEL["train_step_ms"],
                              HOST_US_PER_KERNEL["inference_ms"]) / 1e3
    assert np.allclose(t["base"], np.maximum(t["floor"], host))
    assert (t["base"] > t["floor"]).any()  # tiny graphs: host-bound


def test_lodo_as_ray_tasks_matches_the_in_process_fits(ray_session):
    from spec_builders import tiny_table
    from trappm_ray.train.spec_predictor import SpecTrainConfig, lodo_runs

    t = tiny_table()
    cfg = SpecTrainConfig(variants=("physics",), depths=(2,), rounds=20, nthread=1)
    remote = lodo_runs(t, cfg)[("physics", 2)]
    local = lodo_runs(t, SpecTrainConfig(**{**cfg.__dict__, "parallel": False}))[("physics", 2)]
    assert remote["tested"].all() and np.allclose(remote["log_pred"], local["log_pred"])


@pytest.mark.parametrize("campaign", [False, True])
def test_the_campaign_devices_train_only_when_asked(monkeypatch, campaign):
    """The GPU campaign's devices (the H200 folders) are the check on a GPU no predictor saw: the
    spec model's examples leave them out unless ``campaign`` is set."""
    asked = {}

    class Stop(Exception):
        pass

    def examples(labels, corpora, slugs):
        asked["slugs"] = slugs
        raise Stop

    monkeypatch.setattr(spec_predictor, "examples", examples)
    with pytest.raises(Stop):
        spec_predictor.train_spec_predictor(SpecTrainConfig(labels=LABELS, campaign=campaign))
    held = {s for s in asked["slugs"] if s.startswith("h200-")}
    assert bool(held) == campaign and "rtx3090-amp" in asked["slugs"]
