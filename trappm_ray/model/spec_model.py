"""The spec-based predictor: step time and inference latency on any GPU from its spec sheet alone.

One gradient-boosted model (XGBoost, Chen & Guestrin, KDD 2016) serves every device: its input is
the graph's static features, the log terms of the graph's roofline floor on the device
(:mod:`trappm_ray.physics.roofline`; Williams et al., CACM 2009), the device's spec vector and the
run settings (:mod:`trappm_ray.model.device_features`); its target is log(measured / base), the
correction from the base to the measured time (as PreNeT and NeuSight predict unseen GPUs from
their specs), where the base is the larger of the roofline floor and the host's time to issue the
graph's kernels (:mod:`trappm_ray.model.launch`: small batches are host-bound). The answer is the
geometric mean of the boosters' ratio and one efficiency per target, clamped to the floor: no
step beats the hardware. Intervals are
split-conformal on the leave-one-device-out residuals, so they describe the error on a device the
model has never seen.

Stored as a directory (``trappm_ray/predictors/gpu-spec/``): ``manifest.json`` (kind ``gpu-spec``,
the training devices, rows, targets, LODO figures, residual quantiles, the command) and the boosters
as XGBoost JSON (no pickle: loading runs no code). :class:`SpecPredictor` binds the model to one
device and answers like a :class:`trappm_ray.model.predictor.Predictor`.
"""
from __future__ import annotations

import hashlib
import logging
import math
from pathlib import Path

import numpy as np

from trappm_ray import devices, errors, storage
from trappm_ray.model import launch
from trappm_ray.model.estimator import PredictorError
from trappm_ray.model.manifest import Device, Manifest
from trappm_ray.model.stored import read_manifest
from trappm_ray.model.intervals import quantile_offsets
from trappm_ray.model.device_features import EAGER_TORCH2, KERNELS_COL, feature_names, static_input
from trappm_ray.model.floor_ratio import TARGET_MODES, keeps_own, transferred_ms
from trappm_ray.physics.roofline import device_rates

log = logging.getLogger(__name__)

KIND = "gpu-spec"
SPEC_DIR = Path(__file__).parents[1] / "predictors" / KIND
NOTE = "predicted from device specs alone (no labels for this device)"
# Columns of feature_names() that only place a device on absolute scales (GB, GB/s, TFLOPS, ...).
ABSOLUTE_SPEC = tuple(f"{k}{s}" for k in devices.VECTOR_FIELDS for s in ("", "_missing"))
DERIVED = ("launch_pressure", "compute_over_memory", "forward_share", "log_ridge", "log_tdp_per_tflop",
           "log_bw_per_sm", "log_flops_per_sm", "log_clock")
WORKLOAD = DERIVED[:3]  # ratios of the graph's own roofline terms, no device figure
# variant -> (drop the absolute spec columns, DERIVED columns added); "full" is the GPU
# evaluation's vector; "workload" sees a device only through its roofline floor (and its kind)
VARIANTS = {"full": (False, ()), "physics": (False, DERIVED), "relative": (True, DERIVED),
            "workload": (True, WORKLOAD)}


def _col(names: list[str], x: np.ndarray, name: str) -> np.ndarray:
    return x[:, names.index(name)]


def _spec_value(names: list[str], x: np.ndarray, field: str) -> np.ndarray:
    """A spec field back in its unit (spec_vector stores log1p); NaN where missing."""
    v = np.expm1(_col(names, x, field))
    return np.where(_col(names, x, f"{field}_missing") > 0, np.nan, v)


def derived(x: np.ndarray) -> np.ndarray:
    """``DERIVED`` columns of full feature vectors ``x`` (``[N, len(feature_names())]``).

    Ratios a tree cannot form from separate columns, each a known driver of the gap to the
    roofline: launch pressure (kernels per ms of floor: small workloads are launch-bound), the
    compute/memory balance, the ridge point of the precision used (Williams et al.), power per
    peak FLOP (power-limited cards sustain less of their peak), bandwidth and FLOPs per SM, clock.
    """
    n = feature_names()
    half = _col(n, x, "half") > 0
    fp32 = _spec_value(n, x, "peak_fp32_tflops")
    peak = np.where(half, _spec_value(n, x, "eff_fp16_tflops"), np.fmax(_spec_value(n, x, "eff_tf32_tflops"), fp32))
    bw, sms = _spec_value(n, x, "memory_bw_gbs"), _spec_value(n, x, "sm_count")
    with np.errstate(divide="ignore", invalid="ignore"):
        cols = [_col(n, x, "log_kernels") - _col(n, x, "log_total_ms"),
                _col(n, x, "log_compute_ms") - _col(n, x, "log_memory_ms"),
                _col(n, x, "log_forward_ms") - _col(n, x, "log_total_ms"),
                np.log(peak * 1e3 / bw), np.log(_spec_value(n, x, "tdp_w") / fp32),
                np.log(bw / sms), np.log(peak * 1e3 / sms), np.log(_spec_value(n, x, "boost_clock_mhz"))]
    return np.nan_to_num(np.stack(cols, 1), nan=np.nan, posinf=np.nan, neginf=np.nan)


def design(x: np.ndarray, variant: str) -> np.ndarray:
    """The model's input from full feature vectors ``x``: ``VARIANTS[variant]`` applied
    (missing derived values stay NaN: XGBoost learns a default branch for them)."""
    drop, add = VARIANTS[variant]
    x = np.atleast_2d(np.asarray(x, np.float64))
    keep = [i for i, c in enumerate(feature_names()) if not (drop and c in ABSOLUTE_SPEC)]
    extra = derived(x)[:, [DERIVED.index(c) for c in add]]
    return np.concatenate([x[:, keep], extra], 1)


def design_names(variant: str) -> list[str]:
    """Column names of :func:`design` for ``variant``."""
    drop, add = VARIANTS[variant]
    return [c for c in feature_names() if not (drop and c in ABSOLUTE_SPEC)] + list(add)


class SpecModel:
    """The trained boosters and their manifest (device-independent).

    Args:
        manifest: as written by :func:`trappm_ray.train.spec_predictor.train_spec_predictor`.
        boosters: ``xgboost.Booster`` objects whose mean log ratio is the prediction.
    """

    def __init__(self, manifest: Manifest, boosters: list):
        if manifest.boosters is None:
            raise PredictorError(f"{manifest.name}: a {manifest.kind} predictor, not the spec-based model")
        self.manifest, self.part, self.boosters = manifest, manifest.boosters, boosters

    @classmethod
    def load(cls, uri: str | Path = SPEC_DIR) -> SpecModel:
        """Read a stored spec model; boosters are XGBoost JSON, checked against their hashes."""
        import xgboost as xgb

        uri = str(uri)
        manifest = read_manifest(uri)
        part = manifest.boosters
        if manifest.kind != KIND or part is None or part.variant not in VARIANTS:
            raise PredictorError(f"{uri}: not a {KIND} predictor this version reads")
        try:
            blobs = [storage.read_bytes(storage.join(uri, b["file"])) for b in part.files]
        except (OSError, KeyError) as e:
            raise PredictorError(f"no readable spec predictor at {uri}: {e}") from e
        boosters = []
        for meta, blob in zip(part.files, blobs):
            if hashlib.sha256(blob).hexdigest() != meta["sha256"]:
                raise PredictorError(f"{uri}: {meta['file']} does not match its manifest (damaged copy?)")
            booster = xgb.Booster()
            booster.load_model(bytearray(blob))  # JSON bytes: a model, never code
            booster.set_param({"nthread": 1})
            boosters.append(booster)
        return cls(manifest, boosters)

    def log_ratio(self, x: np.ndarray) -> np.ndarray:
        """The boosters' mean log(measured / base) for full feature vectors ``x``."""
        import xgboost as xgb

        d = xgb.DMatrix(design(x, self.part.variant))
        return np.mean([b.predict(d) for b in self.boosters], 0).astype(np.float64)

    def time_ms(self, x: np.ndarray, floors: np.ndarray, target: str) -> np.ndarray:
        """The answer in ms for feature vectors ``x`` of GPU rows with roofline ``floors``: the
        base (the larger of the floor and the host's time for the graph's kernels) x the
        geometric mean of the boosters' ratio and the target's efficiency, never below the floor.
        A model stored before the base existed predicts against the floor alone."""
        floors = np.asarray(floors, np.float64)
        ratio = self.log_ratio(x)
        if self.part.host_us_per_kernel is None:
            return floors * np.exp(np.maximum(ratio, 0.0))
        base = launch.host_base_ms(floors, np.exp(x[:, KERNELS_COL]), target,
                                   host_us=self.part.host_us_per_kernel)
        ratio = (ratio + self.part.efficiency[target]) / 2
        return np.maximum(base * np.exp(ratio), floors)


def device_note(manifest: Manifest, slug: str, user_spec: bool) -> str:
    """What a prediction for ``slug`` rests on, with the error measured for unseen devices."""
    lodo = manifest.boosters.lodo if manifest.boosters is not None else {}
    err = ", ".join(f"{t} {v['mean_device_mape']:.0f}%" for t, v in lodo.items() if "mean_device_mape" in v)
    rows = (manifest.data.get("rows_per_device") or {}).get(slug, 0)
    if rows and not user_spec:
        own = {t: v["devices"][slug]["mape"] for t, v in lodo.items() if slug in v.get("devices", {})}
        own_s = ", ".join(f"{t} {v:.0f}%" for t, v in own.items())
        return (f"predicted by the spec-based predictor {manifest.version}: its training rows include "
                f"{rows} of this device (held out: {own_s or 'n/a'} MAPE)")
    return (f"{NOTE}; leave-one-device-out MAPE of the spec-based predictor (mean over held-out devices): "
            f"{err or 'not measured'}")


class SpecPredictor:
    """The spec model bound to one device; answers like a shipped :class:`Predictor`.

    Args:
        model: the loaded :class:`SpecModel`.
        spec: the device (a row of the spec table, or a user's ``--device-spec`` JSON).
        user_spec: the spec came from a user's file (its name proves nothing about labels).
        reference: a shipped GPU predictor whose answers transfer to this device
            (:mod:`trappm_ray.model.floor_ratio`), for the targets the device has few rows of.
        anchors: the reference device's measurements by graph (:mod:`trappm_ray.model.anchors`),
            moved instead of the reference's answer for a graph they hold.
    """

    feature_set = "v2"

    def __init__(self, model: SpecModel, spec: devices.DeviceSpec, user_spec: bool = False, reference=None,
                 anchors=None):
        self.model, self.spec = model, spec
        m = model.manifest
        rows = m.data.get("rows_per_device") or {}
        digest = hashlib.sha256(repr(devices.spec_vector(spec).tolist()).encode()).hexdigest()[:8]
        tag = f"{spec.slug}#{digest}" if user_spec else spec.slug
        spec_only = user_spec or not rows.get(spec.slug)
        self.moved = tuple(t for t in m.targets if user_spec or not keeps_own(m, spec.slug, t))
        self.reference = reference if self.moved else None
        self.anchors = anchors if self.reference is not None else None
        note = device_note(m, spec.slug, user_spec)
        if self.reference is not None:
            ref = self.reference.manifest
            opts = ", ".join(f"{k} {'/'.join(map(str, v))}" for k, v in ref.options.items() if k != "gpus")
            note = (f"{note}. In the setting the {ref.name} predictor was trained on ({opts}), "
                    f"{', '.join(self.moved)} are its answer on its GPU x this GPU's roofline floor / that "
                    f"GPU's (reference transfer)")
            if self.anchors is not None:
                note += (f"; for a graph the {self.anchors.device} labels measured (same operators, edges and "
                         f"parameters, a batch within 2x), that measurement / its floor instead of the answer")
        self.manifest = m.replace(name=f"{KIND}:{tag}", device=Device(
            slug=spec.slug, name=spec.name, kind=spec.kind, spec=spec.slug, spec_based=True,
            spec_source="json" if user_spec else "spec table", spec_only=spec_only, note=note,
            reference=self.reference.manifest.name if self.reference else ""))

    @property
    def targets(self) -> tuple[str, ...]:
        return self.model.manifest.targets

    def check(self, setting: dict) -> None:
        """Raise ``errors.UnsupportedOption`` when the device has no roofline at the setting's
        precision (e.g. fp64 on a card whose FP64 peak is not sourced)."""
        try:
            device_rates(self.spec, setting.get("precision") or "amp-fp16")
        except ValueError as e:
            raise errors.UnsupportedOption(str(e)) from None

    def predict_graphs(self, graphs, settings_list: list[dict] | None = None) -> list[dict[str, float]]:
        """One row per graph: per target the prediction (>= the floor), ``_low``/``_high`` (the
        conformal interval at the setting's ``interval_z``), ``_std`` (its log half-width x value),
        ``_floor`` and ``_kernels`` (the graph's kernel count); for a target answered by a
        reference's measurement, ``_measured_batch`` (:func:`~trappm_ray.model.floor_ratio.transferred_ms`).

        Args:
            graphs: featurized graphs at their batch sizes.
            settings_list: per graph the resolved options (``precision``, ``optimizer``,
                ``memory_format``) and ``interval_z``; None: the manifest's defaults.
        """
        default = {k: v[0] for k, v in self.manifest.options.items()} | {"interval_z": 1.96}
        settings_list = [{**default, **{k: v for k, v in s.items() if v is not None}}
                         for s in (settings_list or [default] * len(graphs))]
        modes = [(t, m) for t, m in TARGET_MODES if t in self.targets]
        found: dict[str, list] = {}
        for target, mode in modes:
            found[target] = []
            for graph, s in zip(graphs, settings_list):
                f = static_input(graph, self.spec, s, mode, EAGER_TORCH2)
                if f is None:
                    raise errors.UnsupportedOption(f"{self.spec.slug} has no roofline at {s['precision']}")
                found[target].append(f)
        moved = transferred_ms(self.reference, self.spec, list(graphs), settings_list, self.moved, found,
                               self.anchors) \
            if self.reference is not None else [{} for _ in graphs]
        rows: list[dict] = [{} for _ in graphs]
        for target, mode in modes:
            floors = [f[0] for f in found[target]]
            xs = [f[1] for f in found[target]]
            own = self.model.time_ms(np.stack(xs), np.array(floors), target)
            for row, floor, x, ms, s, m in zip(rows, floors, xs, own, settings_list, moved):
                lo, hi = quantile_offsets(self.model.manifest.residual_quantiles, target, float(s.get("interval_z", 1.96)))
                value = m.get(target, float(ms))
                lo95, hi95 = quantile_offsets(self.model.manifest.residual_quantiles, target, 1.96)
                row.update({target: value, f"{target}_low": max(value * math.exp(lo), floor),
                            f"{target}_high": value * math.exp(max(hi, 0.0)), f"{target}_floor": floor,
                            f"{target}_kernels": round(math.exp(x[KERNELS_COL])),
                            f"{target}_std": value * (hi95 - lo95) / (2 * 1.96)})
                row.update({k: m[k] for k in (f"{target}_measured_batch",) if k in m})
        return rows


__all__ = ["KIND", "SPEC_DIR", "NOTE", "VARIANTS", "DERIVED", "derived", "design", "design_names",
           "SpecModel", "SpecPredictor", "device_note"]
