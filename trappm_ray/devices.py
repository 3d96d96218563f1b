"""Device specs, the one home for what a GPU or CPU can do on paper: ``trappm_ray/data/devices.csv``
(a copy of the committed ``data/devices.csv``) and ``mig_profiles.csv``. Units, definitions and sources:
``docs/devices.md``. Peaks are dense TFLOPS; a figure that could not be sourced is ``None``.
"""
from __future__ import annotations

import collections
import csv
import dataclasses
import difflib
import functools
import json
import logging
import math
import re
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

DEVICES_CSV = Path(__file__).with_name("data") / "devices.csv"
MIG_CSV = DEVICES_CSV.with_name("mig_profiles.csv")
KINDS = ("cuda", "rocm", "cpu")
PRECISIONS = ("fp32", "tf32", "amp-fp16", "fp16", "bf16", "fp64")
# Numeric fields and their plausible range in the units the field name says.
NUMERIC = {"release_year": (1990, 2100), "memory_gb": (0.001, 4096), "memory_bw_gbs": (1, 20000),
           "peak_fp32_tflops": (0.001, 5000), "peak_fp16_tflops": (0.001, 5000), "peak_fp64_tflops": (0.001, 5000),
           **{f"peak_{p}_tensor_tflops": (0.001, 50000) for p in ("fp16", "bf16", "tf32")},
           "sm_count": (1, 100000), "l2_mb": (0.01, 4096), "base_clock_mhz": (100, 10000),
           "boost_clock_mhz": (100, 10000), "tdp_w": (1, 5000), "min_power_limit_w": (1, 5000),
           "max_power_limit_w": (1, 5000), "idle_power_w": (1, 5000)}
REQUIRED_JSON = ("name", "memory_gb", "memory_bw_gbs", "peak_fp32_tflops")
# spec_vector order: log1p(value) and a missing flag per field, then the one-hot of KINDS.
VECTOR_FIELDS = ("memory_gb", "memory_bw_gbs", "peak_fp32_tflops", "eff_fp16_tflops", "eff_bf16_tflops",
                 "eff_tf32_tflops", "peak_fp64_tflops", "sm_count", "l2_mb", "boost_clock_mhz", "tdp_w")
_EFFECTIVE = {"eff_fp16_tflops": "amp-fp16", "eff_bf16_tflops": "bf16", "eff_tf32_tflops": "tf32"}


class UnknownDevice(KeyError):
    """No device has this slug or label name."""
    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class DeviceSpecError(ValueError):
    """A device spec (CSV row or user JSON) is malformed."""


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """One device; the fields are the columns of ``devices.csv`` (see docs/devices.md)."""
    slug: str
    kind: str
    name: str
    vendor: str = ""
    architecture: str = ""
    release_year: int | None = None
    memory_gb: float | None = None
    memory_bw_gbs: float | None = None
    peak_fp32_tflops: float | None = None
    peak_fp16_tflops: float | None = None  # non-tensor (vector) FP16, only where it matters
    peak_fp16_tensor_tflops: float | None = None  # with FP32 accumulate, dense
    peak_bf16_tensor_tflops: float | None = None
    peak_tf32_tensor_tflops: float | None = None
    peak_fp64_tflops: float | None = None
    sm_count: int | None = None  # SMs (NVIDIA), CUs (AMD), cores/threads (CPU)
    l2_mb: float | None = None  # last-level cache for CPUs
    base_clock_mhz: float | None = None  # the vendor's base clock, where sourced
    boost_clock_mhz: float | None = None
    tdp_w: float | None = None
    min_power_limit_w: float | None = None  # the lowest settable power limit, where sourced
    max_power_limit_w: float | None = None  # the highest settable power limit, where sourced
    idle_power_w: float | None = None  # board power idle at P0, where measured or sourced
    mig_capable: bool = False
    unsupported: tuple[str, ...] = ()
    label_names: tuple[str, ...] = ()
    source: str = ""
    notes: str = ""


# One MIG GPU-instance profile (NVIDIA MIG user guide); memory_gb is the GB in the profile's name.
MigProfile = collections.namedtuple("MigProfile", "device_slug profile compute_slices compute_slices_total "
                                    "memory_gb memory_fraction max_instances memory_mib_reported source notes")
_MIG_TYPES = {"compute_slices": int, "compute_slices_total": int, "memory_gb": float, "max_instances": int,
              "memory_mib_reported": lambda v: int(v) if v else None}
# A whole GPU (profile None) or one MIG slice, for "smallest GPU/MIG profile that fits" queries.
MemoryOption = collections.namedtuple("MemoryOption", "device_slug profile memory_gb compute_fraction")


def normalize(name: str) -> str:
    """Lowercase a device name and collapse every run of non-alphanumerics to ``-``."""
    return re.sub(r"[^a-z0-9]+", "-", str(name).lower()).strip("-")


def _spec_from_fields(raw: dict, where: str) -> DeviceSpec:
    """Validate ``raw`` (field -> str/number; "" or None = not sourced); ``where`` names it in errors."""
    known = [f.name for f in dataclasses.fields(DeviceSpec)]
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise DeviceSpecError(f"{where}: unknown field(s) {unknown}; known fields: {known}")
    out: dict = {}
    for key, value in raw.items():
        if value is None or value == "":
            continue
        if key in NUMERIC:
            try:
                num = float(value)
            except (TypeError, ValueError):
                num = math.nan
            if isinstance(value, bool) or not math.isfinite(num) or num <= 0:
                raise DeviceSpecError(f"{where}: {key} must be a positive number, got {value!r}")
            if not NUMERIC[key][0] <= num <= NUMERIC[key][1]:
                raise DeviceSpecError(f"{where}: {key}={num:g} is outside the plausible range {NUMERIC[key]}; "
                                      "check the units in the field name")
            out[key] = int(num) if key in ("release_year", "sm_count") else num
        elif key == "mig_capable":
            out[key] = str(value).strip().lower() in ("1", "true", "yes")
        elif key in ("unsupported", "label_names"):
            items = value.split("|") if isinstance(value, str) else list(value)
            out[key] = tuple(s for s in (str(v).strip() for v in items) if s)
        else:
            out[key] = str(value).strip()
    if not out.get("slug") and not out.get("name"):
        raise DeviceSpecError(f"{where}: a spec needs a 'slug' or a 'name'")
    out.setdefault("slug", normalize(out.get("name", "")))
    out = {"name": out["slug"], "kind": "cuda", **out}
    if out["kind"] not in KINDS:
        raise DeviceSpecError(f"{where}: kind must be one of {KINDS}, got {out['kind']!r}")
    spec = DeviceSpec(**out)
    # A board's settable limits bracket its default limit (the TDP), its base clock is below its boost.
    for low, high in (("min_power_limit_w", "tdp_w"), ("tdp_w", "max_power_limit_w"),
                      ("min_power_limit_w", "max_power_limit_w"), ("base_clock_mhz", "boost_clock_mhz")):
        a, b = getattr(spec, low), getattr(spec, high)
        if a and b and a > b:
            raise DeviceSpecError(f"{where}: {low}={a:g} is above {high}={b:g}")
    fp32, fp16 = spec.peak_fp32_tflops, spec.peak_fp16_tensor_tflops
    if fp32 and fp16 and fp16 < fp32:
        log.warning("%s: fp16 tensor peak %.3g < fp32 peak %.3g TFLOPS; is it dense TFLOPS?", where, fp16, fp32)
    return spec


@functools.lru_cache(maxsize=8)
def _load(path: str) -> tuple[dict[str, DeviceSpec], dict[str, str]]:
    specs: dict[str, DeviceSpec] = {}
    aliases: dict[str, str] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        for line, row in enumerate(csv.DictReader(fh), start=2):
            spec = _spec_from_fields(row, f"{path} line {line}")
            if spec.slug in specs:
                raise DeviceSpecError(f"{path} line {line}: duplicate slug {spec.slug!r}")
            specs[spec.slug] = spec
            for key in {k for a in (spec.slug, *spec.label_names) for k in (a, normalize(a))}:
                if aliases.setdefault(key, spec.slug) != spec.slug:
                    raise DeviceSpecError(f"{path}: name {key!r} maps to {aliases[key]!r} and {spec.slug!r}")
    return specs, aliases


def load_specs(path: str | Path | None = None) -> dict[str, DeviceSpec]:
    """Read the device table as slug -> DeviceSpec, in table order.

    Args:
        path: a devices CSV; default the packaged ``trappm_ray/data/devices.csv``.
    """
    return dict(_load(str(path or DEVICES_CSV))[0])


def get(slug_or_alias: str, path: str | Path | None = None) -> DeviceSpec:
    """Resolve a slug or label spelling (``NVIDIA_A100-PCIE-40GB``); UnknownDevice lists known slugs.

    Args:
        slug_or_alias: matched exactly, then after ``normalize``.
        path: optional devices CSV (default: the packaged table).
    """
    specs, aliases = _load(str(path or DEVICES_CSV))
    slug = aliases.get(str(slug_or_alias)) or aliases.get(normalize(slug_or_alias))
    if slug is None:
        raise UnknownDevice(f"unknown device {slug_or_alias!r}; known slugs: {', '.join(specs)} "
                            "(or describe it with --device-spec FILE.json)")
    return specs[slug]


# Bare family names people type, and the board they most often mean (the one clouds rent):
# documented in docs/devices.md; any other form of the family names its board.
FAMILY_DEFAULTS = {"h100": "h100-sxm5-80gb", "a100": "a100-sxm4-80gb", "v100": "v100-sxm2-16gb",
                   "a100-40gb": "a100-sxm4-40gb", "a100-80gb": "a100-sxm4-80gb", "h100-80gb": "h100-sxm5-80gb"}
VENDOR_WORDS = ("nvidia", "geforce", "tesla", "amd", "instinct", "radeon", "quadro")


def _tokens(name: str) -> list[str]:
    """``normalize``d words of a name without vendor words; letters and digits split
    (``rtx3090`` -> ``rtx``, ``3090``), so that ``RTX 3090``, ``rtx-3090`` and ``3090`` meet."""
    words = re.findall(r"[a-z]+|[0-9]+", normalize(name))
    return [w for w in words if w not in VENDOR_WORDS]


def resolve(name: str, path: str | Path | None = None) -> DeviceSpec:
    """A device as users type it: a slug or label spelling (:func:`get`), a bare family name
    (``h100``: :data:`FAMILY_DEFAULTS`), or words that name one device only (``3090``,
    ``RTX 3090``, ``rtx-4090``, ``l4``, ``A100 80GB PCIe``, an NVML name).

    Raises:
        UnknownDevice: no device, or several, match; the message lists the 2-4 nearest slugs.
    """
    try:
        return get(name, path)
    except UnknownDevice:
        pass
    specs, _ = _load(str(path or DEVICES_CSV))
    key = "-".join(w for w in normalize(name).split("-") if w not in VENDOR_WORDS)
    if key in FAMILY_DEFAULTS:
        return specs[FAMILY_DEFAULTS[key]]
    want = _tokens(name)
    if want:
        found = [s for s in specs.values()
                 if any(all(w in have for w in want) for have in
                        (_tokens(a) for a in (s.slug, s.name, *s.label_names)))]
        if len(found) == 1:
            return found[0]
        if found:
            raise UnknownDevice(f"device {name!r} could be {', '.join(s.slug for s in found[:4])}"
                                f"{' ...' if len(found) > 4 else ''}: name one")
    near = difflib.get_close_matches(normalize(name), list(specs), n=4, cutoff=0.4)
    raise UnknownDevice(f"unknown device {name!r}" + (f"; did you mean {', '.join(near)}?" if near else "")
                        + " (`trappm-ray devices` lists them; another GPU: --device-spec FILE.json)")


def from_json(path: str | Path) -> DeviceSpec:
    """Read a user's ``--device-spec`` JSON object of DeviceSpec fields; raises DeviceSpecError.
    Required: ``name`` (or ``slug``), ``memory_gb``, ``memory_bw_gbs``, ``peak_fp32_tflops``; numbers
    must be positive and plausible in the units their names say (GB, GB/s, dense TFLOPS, MB, MHz, W).

    Args:
        path: the JSON file.
    """
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DeviceSpecError(f"{path}: cannot read device spec JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise DeviceSpecError(f"{path}: a device spec must be a JSON object, got {type(raw).__name__}")
    missing = [k for k in REQUIRED_JSON if raw.get(k) in (None, "") and not (k == "name" and raw.get("slug"))]
    if missing:
        raise DeviceSpecError(f"{path}: missing required field(s) {missing}")
    return _spec_from_fields(raw, str(path))


def peak_flops(spec: DeviceSpec, precision: str) -> float:
    """Peak dense FLOP/s. ``amp-fp16``/``fp16`` use the FP16 tensor peak, ``bf16``/``tf32`` theirs;
    without that unit: the FP16 vector peak (fp16) or the FP32 peak. ValueError when nothing is sourced.

    Args:
        spec: the device.
        precision: one of ``PRECISIONS``.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; expected one of {PRECISIONS}")
    tensor = getattr(spec, f"peak_{precision.replace('amp-', '')}_tensor_tflops", None)
    chain = ([spec.peak_fp64_tflops] if precision == "fp64" else
             [tensor, spec.peak_fp16_tflops if "fp16" in precision else None, spec.peak_fp32_tflops])
    value = next((v for v in chain if v), None)
    if value is None:
        raise ValueError(f"device {spec.slug!r} has no sourced peak for {precision} (see its notes)")
    return value * 1e12


def spec_vector(spec: DeviceSpec) -> np.ndarray:
    """Model input (float32, length ``2 * len(VECTOR_FIELDS) + 3``): per field log1p(value) (0 if
    missing) and a missing flag, then the one-hot of ``KINDS``; ``eff_*`` are ``peak_flops`` in TFLOPS.

    Args:
        spec: the device.
    """
    out: list[float] = []
    for field in VECTOR_FIELDS:
        try:
            value = peak_flops(spec, _EFFECTIVE[field]) / 1e12 if field in _EFFECTIVE else getattr(spec, field)
        except ValueError:
            value = None
        out += [math.log1p(value) if value else 0.0, 0.0 if value else 1.0]
    return np.asarray(out + [float(spec.kind == k) for k in KINDS], dtype=np.float32)


@functools.lru_cache(maxsize=8)
def _load_mig(path: str) -> tuple[MigProfile, ...]:
    with open(path, newline="", encoding="utf-8") as fh:
        return tuple(MigProfile(**{k: _MIG_TYPES.get(k, str)(v) for k, v in row.items()}) for row in csv.DictReader(fh))


def mig_profiles(slug: str, path: str | Path | None = None) -> list[MigProfile]:
    """MIG profiles of a device in table order (empty without MIG).

    Args:
        slug: slug or any alias of the device.
        path: optional MIG profiles CSV (default: the packaged table).
    """
    wanted = get(slug).slug
    return [p for p in _load_mig(str(path or MIG_CSV)) if p.device_slug == wanted]


def all_memory_options() -> list[MemoryOption]:
    """Whole GPUs and MIG slices, smallest memory first (then less compute); ``+me`` variants once."""
    options = {(s.slug, None): MemoryOption(s.slug, None, s.memory_gb, 1.0)
               for s in load_specs().values() if s.kind != "cpu" and s.memory_gb}
    for p in _load_mig(str(MIG_CSV)):
        base = p.profile.split("+")[0]
        options.setdefault((p.device_slug, base), MemoryOption(
            p.device_slug, base, p.memory_gb, p.compute_slices / p.compute_slices_total))
    return sorted(options.values(), key=lambda o: (o.memory_gb, o.compute_fraction, o.device_slug, o.profile or ""))
