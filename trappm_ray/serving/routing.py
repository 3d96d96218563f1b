"""Which predictor answers for a device: the shipped per-device predictors first, then the
spec-based predictor for any other GPU of the spec table or a user's ``--device-spec`` file.

    load_predictor(device="rtx3090")          # shipped: trappm_ray/predictors/rtx3090-amp
    load_predictor(device="a100-sxm4-80gb")   # spec table, no shipped predictor: gpu-spec
    load_predictor(device_spec="my_gpu.json") # a user's GPU: gpu-spec
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from trappm_ray import devices, errors
from trappm_ray.model.anchors import MeasuredAnchors
from trappm_ray.model.estimator import DEFAULT_DIR, Estimator, PredictorError, device_of, model_version, names_device
from trappm_ray.model.manifest import Manifest
from trappm_ray.model.stored import read_manifest
from trappm_ray.model.network_predictor import NetworkPredictor
from trappm_ray.model.spec_model import KIND, SPEC_DIR, SpecModel, SpecPredictor
from trappm_ray.model.options import resolve as resolve_options
from trappm_ray.model.floor_ratio import covers, image_only, keeps_own
from trappm_ray.model.compositions import SettingMove, TargetFill
from trappm_ray.physics.floors import HALF_PRECISIONS

_LOADED: dict[str, Any] = {}  # URI or key -> a loaded predictor, model or anchors
SPEC_HELP = ("describe the GPU in a JSON file and pass --device-spec FILE.json (API: device_spec=..., "
             "fields as in data/devices.csv; required: name, memory_gb, memory_bw_gbs, peak_fp32_tflops; "
             "add peak_fp16_tensor_tflops for tensor cores)")


def _manifest(path: Path) -> Manifest:
    """A shipped predictor's manifest, read once per version of the file (routing reads each
    manifest several times per prediction)."""
    file = path / "manifest.json"
    return _manifest_at(str(file), file.stat().st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _manifest_at(file: str, mtime_ns: int) -> Manifest:
    return read_manifest(str(Path(file).parent))


def _spec_manifest() -> Manifest | None:
    """The shipped spec-based predictor's manifest, None when it is not shipped."""
    return _manifest(SPEC_DIR) if (SPEC_DIR / "manifest.json").exists() else None


def shipped() -> list[Path]:
    """Directories of the shipped per-device predictors (the spec-based one excluded)."""
    return sorted(p.parent for p in DEFAULT_DIR.parent.glob("*/manifest.json")
                  if _manifest(p.parent).kind != KIND)


def spec_model(uri: str | Path | None = None) -> SpecModel:
    """The spec-based model at ``uri`` (None: the shipped ``SPEC_DIR``), loaded once."""
    uri = SPEC_DIR if uri is None else uri
    key = f"spec:{uri}"
    if key not in _LOADED:
        _LOADED[key] = SpecModel.load(uri)
    return _LOADED[key]


def reference_path(spec: devices.DeviceSpec) -> Path | None:
    """The shipped predictor whose answers transfer to ``spec`` (:mod:`trappm_ray.model.floor_ratio`):
    of another GPU of the same kind (same vendor software stack) in the spec table, the one with
    the most targets (then the first by name)."""
    found = [(-len(m.targets), path) for path in shipped() for m in [_manifest(path)]
             if m.device.kind == spec.kind and m.device.spec and m.device.spec != spec.slug]
    return min(found)[1] if found else None


def reference_for(spec: devices.DeviceSpec) -> Estimator | None:
    """:func:`reference_path`'s predictor, loaded (once)."""
    path = reference_path(spec)
    return None if path is None else load_predictor(str(path))


def reference_anchors(spec: devices.DeviceSpec) -> MeasuredAnchors | None:
    """The measurements stored beside :func:`reference_path`'s predictor, loaded (once)."""
    path = reference_path(spec)
    if path is None:
        return None
    key = f"anchors:{path}"
    if key not in _LOADED:
        _LOADED[key] = MeasuredAnchors.load(path)
    return _LOADED[key]


def for_spec(spec: devices.DeviceSpec, user_spec: bool = False, uri: str | Path | None = None) -> SpecPredictor:
    """The spec-based predictor (at ``uri``; None: shipped) bound to ``spec``, with its
    reference predictor; refuses CPUs."""
    uri = SPEC_DIR if uri is None else uri
    if spec.kind == "cpu":
        raise PredictorError(f"{spec.slug} is a CPU with no shipped predictor; the spec-based predictor "
                             "covers GPUs only")
    if user_spec:  # a user's file may change between calls: bound afresh (the model stays cached)
        return SpecPredictor(spec_model(uri), spec, user_spec, reference_for(spec), reference_anchors(spec))
    key = f"spec:{uri}:{spec.slug}"
    if key not in _LOADED:
        _LOADED[key] = SpecPredictor(spec_model(uri), spec, reference=reference_for(spec),
                                     anchors=reference_anchors(spec))
    return _LOADED[key]


def spec_predictor(slug: str) -> SpecPredictor:
    """The shipped spec-based predictor bound to the spec-table device ``slug``."""
    return for_spec(devices.get(slug))


def _is_spec_dir(uri: str) -> bool:
    try:
        return read_manifest(uri).kind == KIND
    except PredictorError:
        return False


def completed(found: Estimator) -> Estimator:
    """``found``, or for a GPU predictor lacking targets the spec-based predictor answers (the
    RTX 4090 has inference labels only), ``found`` completed by it; cached. CPU predictors stay
    as they are: the spec-based predictor covers GPUs only."""
    key = f"completed:{id(found)}"
    if key not in _LOADED:
        _LOADED[key] = (TargetFill(found, spec_predictor(found.manifest.device.spec or ""))
                        if filled_by_spec(found.manifest, _spec_manifest()) else found)
    return _LOADED[key]


def filled_by_spec(manifest: Manifest, spec_manifest: Manifest | None) -> list[str]:
    """Targets the spec-based predictor adds to a shipped predictor (``manifest``) of a GPU in
    the spec table; none for CPUs, which the spec-based predictor does not cover."""
    if spec_manifest is None or not manifest.device.spec or manifest.device.kind == "cpu":
        return []
    return [t for t in spec_manifest.targets if t not in manifest.targets]


def _for_device(device: str) -> Estimator:
    """The estimator for a device as a user names it: a shipped predictor's slug or name, else a
    GPU of the spec table in any spelling :func:`trappm_ray.devices.resolve` reads (its shipped
    predictor where one exists, else the spec-based one)."""
    for path in shipped():
        if names_device(_manifest(path).device, device):
            return completed(load_predictor(str(path)))
    try:
        spec = devices.resolve(device)
    except devices.UnknownDevice as e:
        raise PredictorError(f"{e.args[0]}") from None
    for path in shipped():
        if names_device(_manifest(path).device, spec.slug):
            return completed(load_predictor(str(path)))
    return for_spec(spec)


def load_predictor(predictor: str | os.PathLike | Estimator | None = None,
                   device: str | None = None,
                   device_spec: str | os.PathLike | devices.DeviceSpec | None = None) -> Estimator:
    """A predictor by URI, the shipped one for ``device``, or the spec-based one; cached.

    Args:
        predictor: a URI or instance (a ``gpu-spec`` directory needs ``device`` or ``device_spec``);
            None or ``default``: the shipped predictors.
        device: a slug or name: its shipped predictor, else (a GPU of the spec table) the
            spec-based predictor; None: the default predictor.
        device_spec: a user's GPU (a JSON file as :func:`trappm_ray.devices.from_json` reads, or a
            DeviceSpec): the spec-based predictor for it.

    Raises:
        PredictorError: nothing readable there, an unknown device, a CPU without a shipped
            predictor, or both ``device`` and ``device_spec``.
        trappm_ray.devices.DeviceSpecError: a malformed spec file.
    """
    custom = predictor not in (None, "", "default") and not isinstance(predictor, Estimator)
    if device_spec is not None:
        if device is not None:
            raise PredictorError("give a device or a device spec, not both")
        spec = device_spec if isinstance(device_spec, devices.DeviceSpec) else devices.from_json(Path(device_spec))
        return for_spec(spec, user_spec=True, uri=str(predictor) if custom else None)
    found: Estimator
    if isinstance(predictor, Estimator):
        found = predictor
    elif custom and str(predictor) in _LOADED:  # a network read before (no manifest read again)
        found = _LOADED[str(predictor)]
    elif custom and _is_spec_dir(str(predictor)):
        if device is None:
            raise PredictorError(f"{predictor} is the spec-based predictor: name a device or {SPEC_HELP}")
        return for_spec(devices.get(device), uri=str(predictor))
    elif custom:
        found = _LOADED[str(predictor)] = NetworkPredictor.load(str(predictor))
    elif device is None:
        if "default" not in _LOADED:
            if not (DEFAULT_DIR / "manifest.json").exists():
                raise PredictorError(f"no default predictor shipped at {DEFAULT_DIR}")
            _LOADED["default"] = NetworkPredictor.load(DEFAULT_DIR)
        found = _LOADED["default"]
    else:
        return _for_device(device)
    if device is not None and not names_device(found.manifest.device, device):
        raise PredictorError(f"predictor {model_version(found)} is for device "
                             f"{device_of(found).get('slug')!r}, not {device!r}")
    return found


def predictor_for(device: str | None, predictor: Estimator) -> Estimator:
    """The predictor answering for ``device``: ``predictor``, unless ``device`` names another
    one (then its shipped or spec-based predictor); an unknown device is an UnsupportedOption."""
    if device is None or names_device(predictor.manifest.device, device):
        return predictor
    try:
        return load_predictor(None, device)
    except PredictorError as e:
        raise errors.UnsupportedOption(str(e)) from None


def _composed(kind: str, inner: Estimator, make) -> Estimator:
    """``make()``, built once per ``inner`` object (a pass over many items groups them by it)."""
    key = f"{kind}:{id(inner)}"
    held = _LOADED.get(key)
    if held is None or held[0] is not inner:  # the inner object is held too: its id stays its own
        held = _LOADED[key] = (inner, make())
    return held[1]


def gpu_spec(chosen: Estimator) -> devices.DeviceSpec | None:
    """The spec of the GPU ``chosen`` answers for; None for CPUs and devices outside the table.
    A spec-based predictor and a setting move carry theirs (a user's ``--device-spec`` too)."""
    if isinstance(chosen, (SpecPredictor, SettingMove)):
        return chosen.spec
    dev = chosen.manifest.device
    if dev.kind == "cpu" or not dev.spec:
        return None
    try:
        return devices.get(dev.spec)
    except KeyError:
        return None


def settled(requested: dict, chosen: Estimator) -> tuple[Estimator, dict]:
    """(predictor, resolved setting) for the ``requested`` options: a precision or optimizer no
    label of the device holds moved from the nearest one that does by the step model
    (:class:`SettingMove`); anything else is refused.

    Raises:
        errors.UnsupportedOption: no composition answers the setting.
    """
    try:
        setting = resolve_options(requested, chosen.manifest)
        return from_reference(chosen, setting), setting
    except errors.UnsupportedOption as e:
        refused = e
    spec = gpu_spec(chosen)
    if spec is None:
        raise refused
    moved = _composed("move", chosen, lambda: SettingMove(chosen, spec))
    setting = resolve_options(requested, moved.manifest)
    return from_reference(moved, setting), setting


# Precisions a spec-based answer moves from its reference's AMP answer where the reference's
# labels do not hold them: the 16-bit ones (one arithmetic) and TF32 (the tensor cores at half
# their 16-bit rate, activations in fp32). On the H200 campaign's 192 TF32 rows the move reads the
# training step 19.4% off (median; 31.7% at batch >= 32) where the spec model's own TF32 answer read
# 22.6% (42.1%), which took TF32 transformers for barely slower than AMP; inference 24.4% against
# 31.3%. fp32 keeps the spec model's own answer, trained on many fp32 rows: 5.8% median on the
# campaign's 24 fp32 rows of PyTorch's default math (BERT, GPT-2), 10.7% moved (experiments/tf32_route.py).
MOVED_FROM_AMP = (*HALF_PRECISIONS, "tf32")


def from_reference(chosen: Estimator, setting: dict) -> Estimator:
    """``chosen``, or where it is a spec-based predictor (or a setting move of one) whose
    reference transfer covers ``setting``'s base but for its optimizer (``none`` on an H100, which
    the spec model's own rows hold) or its 16-bit or TF32 precision (:data:`MOVED_FROM_AMP`; pure
    fp16's own rows on older GPUs read an H100's ResNet-50 step 13% slower than AMP), the reference's answer moved by the
    step model (:class:`SettingMove`): settings next to each other rest on one level, and doing
    less work never reads slower."""
    inner = chosen.inner if isinstance(chosen, SettingMove) else chosen
    ref = getattr(inner, "reference", None)
    if not isinstance(inner, SpecPredictor) or ref is None:
        return chosen
    base = chosen.base(setting) if isinstance(chosen, SettingMove) else setting
    options = ref.manifest.options
    held = {"optimizer": list(options.get("optimizer") or []),
            "precision": [p for p in options.get("precision") or [] if p in HALF_PRECISIONS]
            if setting.get("precision") in MOVED_FROM_AMP else []}
    held = {f: values for f, values in held.items() if values and base.get(f) not in values}
    if not held or not covers(ref.manifest, {**base, **{f: v[0] for f, v in held.items()}}, "train"):
        return chosen
    return _composed(f"reference-move:{','.join(held)}", inner, lambda: SettingMove(inner, inner.spec, held=held))


def for_text(chosen: Estimator, requested: dict) -> tuple[Estimator, dict, str] | None:
    """For a text model (token-id input): where ``chosen`` rests on a GPU predictor whose labels
    hold image models only (timm's), the spec-based predictor of the same device, whose rows
    include transformer LMs on several GPUs, composed for the setting asked as any predictor is
    (:func:`settled`: AdamW or bf16 on an RTX 3090 moved by the step model from what its rows
    hold): ``(predictor, resolved setting, note)``; else None.

    Raises:
        errors.UnsupportedOption: no composition of the spec-based predictor answers the setting.
    """
    inner = chosen
    while isinstance(inner, SettingMove | TargetFill):  # the device's own predictor under its compositions
        inner = inner.inner if isinstance(inner, SettingMove) else inner.shipped
    spec = inner.manifest.device.spec
    if isinstance(inner, SpecPredictor) or not spec or not image_only(inner.manifest):
        return None
    try:
        alt = spec_predictor(spec)
    except (PredictorError, KeyError):
        return None
    note = (f"a text model: the {inner.manifest.name} predictor's labels hold image models only "
            f"({', '.join(inner.manifest.data['model_sources'])}); the spec-based predictor answers, "
            f"from its rows of this device and of transformer LMs on other GPUs")
    composed, setting = settled(requested, alt)
    composed.check(setting)
    return composed, setting, note


def device_catalog() -> list[dict]:
    """Every device a prediction can name: the shipped predictors, then the GPUs of the spec
    table that the spec-based predictor serves (with its leave-one-device-out error)."""
    out, served = [], []
    spec_m = _spec_manifest()
    for path in shipped():
        m = _manifest(path)
        dev = m.device
        served.append(dev)
        out.append({"device": dev.slug, "name": dev.name, "kind": dev.kind,
                    "predictor": path.name, "spec_only": False, "targets": list(m.targets),
                    "filled_by_spec": filled_by_spec(m, spec_m), "options": m.options,
                    "labels": m.data.get("labels")})
    if spec_m is None or spec_m.boosters is None:
        return out
    m = spec_m
    lodo = {t: v.get("mean_device_mape") for t, v in spec_m.boosters.lodo.items()}
    rows = m.data.get("rows_per_device") or {}
    for s in devices.load_specs().values():
        if s.kind == "cpu" or any(names_device(d, s.slug) for d in served):
            continue
        ref = reference_path(s)
        moved = [t for t in m.targets if not keeps_own(m, s.slug, t)] if ref else []
        out.append({"device": s.slug, "name": s.name, "kind": s.kind, "predictor": KIND,
                    "spec_only": not rows.get(s.slug), "training_rows": rows.get(s.slug, 0),
                    "targets": list(m.targets), "options": m.options, "lodo_mape": lodo,
                    "reference": ref.name if ref and moved else None, "transferred": moved})
    return out


def device_listing() -> dict:
    """``trappm-ray devices``: the shipped predictors, the spec-based one (what it was trained on,
    its leave-one-device-out error) and every GPU of the spec table with who answers it."""
    catalog = device_catalog()
    spec_m = _spec_manifest()
    spec_info = None if spec_m is None or spec_m.boosters is None else {
        "predictor": KIND, "kind": spec_m.kind, "variant": spec_m.boosters.variant,
        "targets": list(spec_m.targets), "options": spec_m.options,
        "trained_on": {"devices": sorted(spec_m.data.get("rows_per_device") or {}), "rows": spec_m.data.get("rows")},
        "lodo_mape": {t: v.get("mean_device_mape") for t, v in spec_m.boosters.lodo.items()},
        "devices": [d["device"] for d in catalog if d["predictor"] == KIND], "command": spec_m.command}
    served = {d["device"]: d for d in catalog if d["predictor"] == KIND}
    specs = [{"slug": s.slug, "kind": s.kind, "name": s.name, "memory_gb": s.memory_gb,
              "predictor": next((d["predictor"] for d in catalog if d["device"] == s.slug
                                 or str(d["device"]).startswith(s.slug + "-")), None),
              "transfer": {t: served[s.slug]["reference"] for t in served[s.slug]["transferred"]}
              if s.slug in served else {},
              "mig_profiles": [p.profile for p in devices.mig_profiles(s.slug)]}
             for s in devices.load_specs().values()]
    return {"predictors": [d for d in catalog if d["predictor"] != KIND], "spec_predictor": spec_info, "specs": specs}


__all__ = ["SPEC_HELP", "shipped", "spec_model", "reference_path", "reference_for", "reference_anchors", "for_spec",
           "spec_predictor", "predictor_for", "settled", "gpu_spec", "for_text", "device_catalog", "device_listing", "completed", "filled_by_spec"]
