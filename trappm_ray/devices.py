"""Device specs: the one home for what a GPU or CPU can do on paper.

The table lives in ``trappm_ray/data/devices.csv`` (a copy of the committed ``data/devices.csv``)
with MIG profiles in ``mig_profiles.csv``; units and sources are in ``docs/devices.md``. Peaks are
dense (no 2:4 sparsity), in TFLOPS; memory in GB (1e9 bytes); bandwidth in GB/s.
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import json
import logging
import math
import re
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

DATA_DIR = Path(__file__).with_name("data")
DEVICES_CSV = DATA_DIR / "devices.csv"
MIG_CSV = DATA_DIR / "mig_profiles.csv"

KINDS = ("cuda", "rocm", "cpu")
PRECISIONS = ("fp32", "tf32", "amp-fp16", "fp16", "bf16", "fp64")
# Numeric fields with their plausible range (units in the name); None = no upper check.
NUMERIC = {
    "release_year": (1990, 2100), "memory_gb": (0.001, 4096), "memory_bw_gbs": (1, 20000),
    "peak_fp32_tflops": (0.001, 5000), "peak_fp16_tflops": (0.001, 5000),
    "peak_fp16_tensor_tflops": (0.001, 50000), "peak_bf16_tensor_tflops": (0.001, 50000),
    "peak_tf32_tensor_tflops": (0.001, 50000), "peak_fp64_tflops": (0.001, 5000),
    "sm_count": (1, 100000), "l2_mb": (0.01, 4096), "boost_clock_mhz": (100, 10000), "tdp_w": (1, 5000),
}
REQUIRED_JSON = ("name", "memory_gb", "memory_bw_gbs", "peak_fp32_tflops")
# Fixed order of spec_vector's value part (each followed by its missing flag, then the kind one-hot).
VECTOR_FIELDS = ("memory_gb", "memory_bw_gbs", "peak_fp32_tflops", "eff_fp16_tflops", "eff_bf16_tflops",
                 "eff_tf32_tflops", "peak_fp64_tflops", "sm_count", "l2_mb", "boost_clock_mhz", "tdp_w")


class UnknownDevice(KeyError):
    """No device has this slug or label name."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class DeviceSpecError(ValueError):
    """A device spec (CSV row or user JSON) is malformed."""


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """One device. Missing figures are ``None`` (not sourced), never guessed."""

    slug: str
    kind: str
    name: str
    vendor: str = ""
    architecture: str = ""
    release_year: int | None = None
    memory_gb: float | None = None
    memory_bw_gbs: float | None = None
    peak_fp32_tflops: float | None = None
    peak_fp16_tflops: float | None = None
    peak_fp16_tensor_tflops: float | None = None
    peak_bf16_tensor_tflops: float | None = None
    peak_tf32_tensor_tflops: float | None = None
    peak_fp64_tflops: float | None = None
    sm_count: int | None = None
    l2_mb: float | None = None
    boost_clock_mhz: float | None = None
    tdp_w: float | None = None
    mig_capable: bool = False
    unsupported: tuple[str, ...] = ()
    label_names: tuple[str, ...] = ()
    source: str = ""
    notes: str = ""


@dataclasses.dataclass(frozen=True)
class MigProfile:
    """One MIG GPU-instance profile of a device (NVIDIA MIG user guide); memory in GB as named."""

    device_slug: str
    profile: str
    compute_slices: int
    compute_slices_total: int
    memory_gb: float
    memory_fraction: str
    max_instances: int
    memory_mib_reported: int | None
    source: str
    notes: str = ""


@dataclasses.dataclass(frozen=True)
class MemoryOption:
    """A whole GPU (``profile`` None) or one MIG slice, for "smallest that fits" queries."""

    device_slug: str
    profile: str | None
    memory_gb: float
    compute_fraction: float


def normalize(name: str) -> str:
    """Lowercase a device name and collapse every run of non-alphanumerics to ``-``."""
    return re.sub(r"[^a-z0-9]+", "-", str(name).lower()).strip("-")


def _spec_from_fields(raw: dict, where: str) -> DeviceSpec:
    """Validate a mapping of field -> value (strings or numbers) and build a spec.

    Args:
        raw: field values; empty strings and None mean "not sourced".
        where: names the row or file in error messages.
    """
    known = {f.name for f in dataclasses.fields(DeviceSpec)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise DeviceSpecError(f"{where}: unknown field(s) {unknown}; known fields: {sorted(known)}")
    out: dict = {}
    for key, value in raw.items():
        if value is None or value == "":
            continue
        if key in NUMERIC:
            if isinstance(value, bool):
                raise DeviceSpecError(f"{where}: {key} must be a number, got {value!r}")
            try:
                num = float(value)
            except (TypeError, ValueError):
                raise DeviceSpecError(f"{where}: {key} must be a number, got {value!r}") from None
            lo, hi = NUMERIC[key]
            if not math.isfinite(num) or num <= 0:
                raise DeviceSpecError(f"{where}: {key} must be a positive number, got {value!r}")
            if not lo <= num <= hi:
                raise DeviceSpecError(f"{where}: {key}={num:g} is outside the plausible range "
                                      f"[{lo:g}, {hi:g}]; check the units in the field name")
            out[key] = int(num) if key in ("release_year", "sm_count") else num
        elif key == "mig_capable":
            out[key] = str(value).strip().lower() in ("1", "true", "yes")
        elif key in ("unsupported", "label_names"):
            items = value.split("|") if isinstance(value, str) else list(value)
            out[key] = tuple(str(v).strip() for v in items if str(v).strip())
        else:
            out[key] = str(value).strip()
    if not out.get("slug"):
        if not out.get("name"):
            raise DeviceSpecError(f"{where}: a spec needs a 'slug' or a 'name'")
        out["slug"] = normalize(out["name"])
    out.setdefault("name", out["slug"])
    out.setdefault("kind", "cuda")
    if out["kind"] not in KINDS:
        raise DeviceSpecError(f"{where}: kind must be one of {KINDS}, got {out['kind']!r}")
    spec = DeviceSpec(**out)
    fp32, fp16 = spec.peak_fp32_tflops, spec.peak_fp16_tensor_tflops
    if fp32 and fp16 and fp16 < fp32:
        log.warning("%s: fp16 tensor peak %.3g < fp32 peak %.3g TFLOPS; is it dense TFLOPS?", where, fp16, fp32)
    return spec


@functools.lru_cache(maxsize=8)
def _load(path: str) -> tuple[dict[str, DeviceSpec], dict[str, str]]:
    specs: dict[str, DeviceSpec] = {}
    aliases: dict[str, str] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        for i, row in enumerate(csv.DictReader(fh), start=2):
            spec = _spec_from_fields(row, f"{path} line {i}")
            if spec.slug in specs:
                raise DeviceSpecError(f"{path} line {i}: duplicate slug {spec.slug!r}")
            specs[spec.slug] = spec
            for alias in {spec.slug, *spec.label_names}:
                for key in {alias, normalize(alias)}:
                    if aliases.setdefault(key, spec.slug) != spec.slug:
                        raise DeviceSpecError(f"{path}: name {alias!r} maps to both "
                                              f"{aliases[key]!r} and {spec.slug!r}")
    log.debug("loaded %d device specs from %s", len(specs), path)
    return specs, aliases


def load_specs(path: str | Path | None = None) -> dict[str, DeviceSpec]:
    """Read the device table.

    Args:
        path: a devices CSV; defaults to the packaged ``trappm_ray/data/devices.csv``.

    Returns:
        slug -> DeviceSpec, in table order (a fresh dict; the specs are frozen).
    """
    return dict(_load(str(path or DEVICES_CSV))[0])


def get(slug_or_alias: str, path: str | Path | None = None) -> DeviceSpec:
    """Resolve a slug or any label spelling (``rtx3090``, ``NVIDIA_A100-PCIE-40GB``, ``TITAN Xp``).

    Args:
        slug_or_alias: the name to look up; matched exactly, then normalized.
        path: optional devices CSV (default: packaged table).

    Raises:
        UnknownDevice: listing the known slugs.
    """
    specs, aliases = _load(str(path or DEVICES_CSV))
    slug = aliases.get(str(slug_or_alias)) or aliases.get(normalize(slug_or_alias))
    if slug is None:
        raise UnknownDevice(f"unknown device {slug_or_alias!r}; known slugs: {', '.join(specs)} "
                            "(or pass --device-spec FILE.json)")
    return specs[slug]


def from_json(path: str | Path) -> DeviceSpec:
    """Read a user's ``--device-spec`` JSON file (one object with DeviceSpec fields).

    Required: ``name`` (or ``slug``), ``memory_gb``, ``memory_bw_gbs``, ``peak_fp32_tflops``;
    numbers must be positive and in the units the field names say (GB, GB/s, dense TFLOPS, MHz, W).

    Args:
        path: the JSON file.

    Raises:
        DeviceSpecError: unreadable file, not an object, unknown field, missing or bad value.
    """
    where = str(path)
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DeviceSpecError(f"{where}: cannot read device spec JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise DeviceSpecError(f"{where}: a device spec must be a JSON object, got {type(raw).__name__}")
    missing = [k for k in REQUIRED_JSON if raw.get(k) in (None, "") and not (k == "name" and raw.get("slug"))]
    if missing:
        raise DeviceSpecError(f"{where}: missing required field(s) {missing}")
    return _spec_from_fields(raw, where)


def peak_flops(spec: DeviceSpec, precision: str) -> float:
    """Peak dense FLOP/s for a training/inference precision.

    ``amp-fp16``/``fp16`` use the FP16 tensor peak, ``bf16`` the BF16 tensor peak, ``tf32`` the TF32
    tensor peak; where a device lacks that unit the math runs at FP32 (or FP16 vector) rate.

    Args:
        spec: the device.
        precision: one of ``PRECISIONS``.

    Raises:
        ValueError: unknown precision, or the device has no sourced figure for it.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; expected one of {PRECISIONS}")
    if precision == "fp64":
        chain = [spec.peak_fp64_tflops]
    else:
        tensor = {"tf32": spec.peak_tf32_tensor_tflops, "bf16": spec.peak_bf16_tensor_tflops,
                  "amp-fp16": spec.peak_fp16_tensor_tflops, "fp16": spec.peak_fp16_tensor_tflops}
        chain = [tensor.get(precision), spec.peak_fp16_tflops if "fp16" in precision else None,
                 spec.peak_fp32_tflops]
    value = next((v for v in chain if v), None)
    if value is None:
        raise ValueError(f"device {spec.slug!r} has no sourced peak for {precision} (see its notes)")
    return value * 1e12


def spec_vector(spec: DeviceSpec) -> np.ndarray:
    """Fixed-order model input: log1p of each ``VECTOR_FIELDS`` value (0 if missing), its missing
    flag, then a one-hot of ``KINDS``. ``eff_*`` are ``peak_flops`` for fp16/bf16/tf32 in TFLOPS.

    Args:
        spec: the device.

    Returns:
        float32 array of length ``2 * len(VECTOR_FIELDS) + len(KINDS)``.
    """
    out: list[float] = []
    for field in VECTOR_FIELDS:
        if field.startswith("eff_"):
            try:
                value = peak_flops(spec, {"eff_fp16_tflops": "amp-fp16", "eff_bf16_tflops": "bf16",
                                          "eff_tf32_tflops": "tf32"}[field]) / 1e12
            except ValueError:
                value = None
        else:
            value = getattr(spec, field)
        out += [math.log1p(value) if value else 0.0, 0.0 if value else 1.0]
    out += [1.0 if spec.kind == k else 0.0 for k in KINDS]
    return np.asarray(out, dtype=np.float32)


@functools.lru_cache(maxsize=8)
def _load_mig(path: str) -> tuple[MigProfile, ...]:
    types = {f.name: f.type for f in dataclasses.fields(MigProfile)}
    conv = {"int": int, "float": float, "int | None": lambda v: int(v) if v else None}
    with open(path, newline="", encoding="utf-8") as fh:
        return tuple(MigProfile(**{k: conv.get(types[k], str)(v) for k, v in row.items()})
                     for row in csv.DictReader(fh))


def mig_profiles(slug: str, path: str | Path | None = None) -> list[MigProfile]:
    """MIG profiles of a device (empty for devices without MIG).

    Args:
        slug: slug or any alias of the device.
        path: optional MIG profiles CSV (default: packaged table).
    """
    device = get(slug).slug
    return [p for p in _load_mig(str(path or MIG_CSV)) if p.device_slug == device]


def all_memory_options() -> list[MemoryOption]:
    """Whole GPUs and MIG slices with their memory, smallest first (ties: less compute first).

    Variants of a profile with the same memory and compute (``+me``) appear once.
    """
    options = {}
    for spec in load_specs().values():
        if spec.kind != "cpu" and spec.memory_gb:
            options[(spec.slug, None)] = MemoryOption(spec.slug, None, spec.memory_gb, 1.0)
    for p in _load_mig(str(MIG_CSV)):
        base = p.profile.split("+")[0]
        options.setdefault((p.device_slug, base), MemoryOption(
            p.device_slug, base, p.memory_gb, p.compute_slices / p.compute_slices_total))
    return sorted(options.values(), key=lambda o: (o.memory_gb, o.compute_fraction, o.device_slug, o.profile or ""))
