"""The device spec table (data/devices.csv), its MIG profiles and trappm_ray.devices."""
from __future__ import annotations

import csv
import json
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from trappm_ray import devices

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT.parent / "shared" / "data" / "public-gpu"
REQUIRED_COLUMNS = [
    "slug", "kind", "name", "vendor", "architecture", "release_year", "memory_gb", "memory_bw_gbs",
    "peak_fp32_tflops", "peak_fp16_tensor_tflops", "peak_bf16_tensor_tflops", "peak_tf32_tensor_tflops",
    "peak_fp64_tflops", "sm_count", "l2_mb", "boost_clock_mhz", "tdp_w", "mig_capable", "label_names",
    "source", "notes",
]
# Device spellings used by the public label sets (../shared/data/public-gpu, see its SOURCES.md) and
# by this project's own labels; listed here so the test runs without the shared folder too.
LABEL_NAMES = [
    "rtx3090", "rtx4090", "4090", "i9_10940x",
    "AMD_Instinct_MI100", "AMD_Instinct_MI210", "AMD_Instinct_MI250", "NVIDIA_A100-PCIE-40GB",
    "NVIDIA_A100-SXM4-40GB", "NVIDIA_A100_80GB_PCIe", "Tesla_P100-PCIE-16GB", "Tesla_P4", "Tesla_T4",
    "Tesla_V100-PCIE-32GB", "NVIDIA_H100_80GB_HBM3", "NVIDIA_L4",
    "GeForce GTX 1080 Ti", "GeForce RTX 2080 Ti", "TITAN Xp", "TITAN RTX", "TITAN V", "A100-SXM4-40GB",
    "1080TI", "2080TI", "2080ti(2)", "TITANXP", "TitanRTX", "TitanV", "dgx-a100",
    "intel-r-xeon-r-processor-t1", "intel-r-xeon-r-processor-t2",
]
COMMON = ["a100-sxm4-40gb", "a100-pcie-40gb", "a100-pcie-80gb", "a100-sxm4-80gb", "h100-sxm5-80gb",
          "h100-pcie-80gb", "h200-sxm-141gb", "l4", "l40s", "a10g", "t4", "v100-pcie-32gb", "v100-sxm2-16gb",
          "rtx3090", "rtx4090", "rtx5090", "rtx-pro-6000-blackwell"]


def _rows(name: str) -> list[dict]:
    with open(ROOT / "data" / name, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _public_label_names() -> set[str]:
    """Device spellings found in the shared public label folders (empty if absent)."""
    names: set[str] = set()
    if not PUBLIC.is_dir():
        return names
    for f in (PUBLIC / "timm").glob("benchmark-*.csv"):
        names.add(re.sub(r"-dynamo$", "", f.stem).split("-")[-1])
    names.update(p.name for p in (PUBLIC / "neusight" / "label").iterdir() if p.is_dir())
    for f in (PUBLIC / "ryujaehun").rglob("*_benchmark*.csv"):
        names.add(f.name.split("_")[0])
        if f.parent.parent.name == "results":  # results/<device folder>/; new_results/ is the 2080 Ti
            names.add(f.parent.name)
    return names


def test_columns_and_packaged_copies():
    for name in ("devices.csv", "mig_profiles.csv", "clusters.csv"):
        assert (ROOT / "data" / name).read_bytes() == (ROOT / "trappm_ray" / "data" / name).read_bytes(), \
            f"trappm_ray/data/{name} must be a byte copy of data/{name}"
    with open(ROOT / "data" / "devices.csv", newline="", encoding="utf-8") as fh:
        header = next(csv.reader(fh))
    assert [c for c in REQUIRED_COLUMNS if c not in header] == []
    assert set(header) == {f.name for f in devices.dataclasses.fields(devices.DeviceSpec)}


def test_units_plausible():
    specs = devices.load_specs()
    assert len(specs) >= 30
    for spec in specs.values():
        assert spec.kind in devices.KINDS and spec.source, spec.slug
        if spec.memory_bw_gbs:
            assert 10 <= spec.memory_bw_gbs <= 10000, spec.slug
        if spec.kind != "cpu":
            assert spec.memory_gb and 4 <= spec.memory_gb <= 300, spec.slug
        fp32, fp16, tf32 = spec.peak_fp32_tflops, spec.peak_fp16_tensor_tflops, spec.peak_tf32_tensor_tflops
        if fp32 and fp16:
            assert fp16 >= fp32, f"{spec.slug}: tensor-core fp16 peak below fp32"
        if fp16 and tf32:
            assert fp32 <= tf32 <= fp16, spec.slug
        if spec.peak_bf16_tensor_tflops and fp16:
            assert 0.4 <= spec.peak_bf16_tensor_tflops / fp16 <= 1.0, spec.slug
        if spec.boost_clock_mhz:
            assert 500 <= spec.boost_clock_mhz <= 5000, spec.slug
        if spec.sm_count and fp32 and spec.kind == "cuda" and spec.boost_clock_mhz:
            # FP32 peak = SMs x 64 or 128 lanes (192 on Kepler's SMX) x 2 FLOP x clock, within 10%
            lanes = fp32 * 1e6 / (2 * spec.sm_count * spec.boost_clock_mhz)
            assert min(abs(lanes / n - 1) for n in (64, 128, 192)) < 0.1, (spec.slug, lanes)
    for slug in COMMON:
        assert slug in specs, slug
    assert "GCD" in specs["mi250"].notes and specs["mi250"].memory_gb == 64


def test_every_label_device_resolves():
    names = set(LABEL_NAMES) | _public_label_names()
    unresolved = []
    for name in sorted(names):
        try:
            devices.get(name)
        except KeyError:
            unresolved.append(name)
    assert unresolved == []
    assert devices.get("NVIDIA_A100-PCIE-40GB").slug == "a100-pcie-40gb"
    assert devices.get("NVIDIA A100-PCIE-40GB").slug == "a100-pcie-40gb"
    assert devices.get("dgx-a100").slug == "a100-sxm4-40gb"
    assert devices.get("TITAN Xp").slug == "titan-xp"
    from trappm_ray.labels.store import compact_labels, device_slugs

    labels = str(ROOT / "data" / "labels")
    for slug in device_slugs(labels):  # imported folders name their spec; harness folders are it
        named = {s for s in compact_labels(labels, slug).column("device_spec").to_pylist() if s}
        assert devices.get(named.pop() if named else slug), slug


def test_unknown_device_lists_slugs():
    with pytest.raises(KeyError) as err:
        devices.get("rtx9999")
    assert isinstance(err.value, devices.UnknownDevice)
    assert "rtx9999" in str(err.value) and "rtx3090" in str(err.value) and "a100-pcie-40gb" in str(err.value)


def test_mig_profiles_consistent():
    specs = devices.load_specs()
    rows = _rows("mig_profiles.csv")
    assert {r["device_slug"] for r in rows} == {s.slug for s in specs.values() if s.mig_capable}
    for r in rows:
        spec = specs[r["device_slug"]]
        g, gb = re.fullmatch(r"(\d+)g\.(\d+)gb(\+me)?", r["profile"]).groups()[:2]
        assert int(g) == int(r["compute_slices"]) and float(gb) == float(r["memory_gb"]), r["profile"]
        frac = Fraction(r["memory_fraction"])
        assert int(r["max_instances"]) * frac <= 1, r
        assert int(r["max_instances"]) * int(r["compute_slices"]) <= int(r["compute_slices_total"]), r
        assert float(r["memory_gb"]) <= spec.memory_gb + 0.5, r
        assert abs(float(r["memory_gb"]) - float(frac) * spec.memory_gb) <= 1.0, r
        if r["memory_mib_reported"]:
            assert int(r["memory_mib_reported"]) / 1024 <= float(r["memory_gb"]), r
        assert "MIG" in r["source"] or "go-nvml" in r["source"]


def test_mig_profiles_a100_h100():
    a100 = {p.profile: p for p in devices.mig_profiles("a100-sxm4-40gb")}
    assert list(a100)[0] == "1g.5gb" and a100["1g.5gb"].max_instances == 7
    assert a100["3g.20gb"].max_instances == 2 and a100["7g.40gb"].compute_slices == 7
    assert [p.profile for p in devices.mig_profiles("NVIDIA_A100-PCIE-40GB")] == list(a100)
    assert {p.profile for p in devices.mig_profiles("a100-pcie-80gb")} >= {"1g.10gb", "2g.20gb", "7g.80gb"}
    for slug in ("h100-sxm5-80gb", "h100-pcie-80gb"):
        h100 = {p.profile: p for p in devices.mig_profiles(slug)}
        assert h100["1g.10gb"].max_instances == 7 and h100["1g.20gb"].max_instances == 4
        assert h100["7g.80gb"].memory_gb == 80
    assert devices.mig_profiles("h200-sxm-141gb")[0].profile == "1g.18gb"
    assert devices.mig_profiles("rtx3090") == []


def test_all_memory_options_sorted():
    options = devices.all_memory_options()
    mem = [o.memory_gb for o in options]
    assert mem == sorted(mem) and options[0].profile == "1g.5gb"
    assert not any(o.profile and "+" in o.profile for o in options)
    assert any(o.profile is None and o.device_slug == "rtx3090" for o in options)
    assert all(o.device_slug not in ("i9-10940x", "intel-r-xeon-r-processor-t1") for o in options)
    fits_30 = next(o for o in options if o.memory_gb >= 30)
    assert fits_30.memory_gb == 32


def test_peak_flops():
    assert devices.peak_flops(devices.get("rtx3090"), "amp-fp16") == pytest.approx(71e12)
    assert devices.peak_flops(devices.get("rtx3090"), "fp32") == pytest.approx(35.6e12)
    assert devices.peak_flops(devices.get("a100-sxm4-40gb"), "tf32") == pytest.approx(156e12)
    assert devices.peak_flops(devices.get("a100-sxm4-40gb"), "bf16") == pytest.approx(312e12)
    assert devices.peak_flops(devices.get("v100-pcie-32gb"), "fp64") == pytest.approx(7e12)
    assert devices.peak_flops(devices.get("t4"), "bf16") == pytest.approx(8.1e12)  # no BF16 unit
    assert devices.peak_flops(devices.get("p100-pcie-16gb"), "fp16") == pytest.approx(18.7e12)
    with pytest.raises(ValueError, match="precision"):
        devices.peak_flops(devices.get("rtx3090"), "int8")
    with pytest.raises(ValueError, match="no sourced peak"):
        devices.peak_flops(devices.get("a10g"), "fp32")


def test_spec_vector_fixed_length():
    vectors = [devices.spec_vector(s) for s in devices.load_specs().values()]
    assert {v.shape for v in vectors} == {(2 * len(devices.VECTOR_FIELDS) + len(devices.KINDS),)}
    assert all(np.isfinite(v).all() and v.dtype == np.float32 for v in vectors)
    v = devices.spec_vector(devices.get("rtx3090"))
    assert v[0] == pytest.approx(np.log1p(24)) and v[1] == 0.0 and v[-3:].tolist() == [1.0, 0.0, 0.0]


def _write(tmp_path: Path, obj) -> Path:
    path = tmp_path / "spec.json"
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return path


VALID = {"name": "My GPU 48GB", "memory_gb": 48, "memory_bw_gbs": 960, "peak_fp32_tflops": 40,
         "peak_fp16_tensor_tflops": 160, "sm_count": 100, "tdp_w": 300}


def test_from_json_valid(tmp_path):
    spec = devices.from_json(_write(tmp_path, VALID))
    assert spec.slug == "my-gpu-48gb" and spec.kind == "cuda" and spec.memory_gb == 48
    assert devices.peak_flops(spec, "amp-fp16") == pytest.approx(160e12)
    assert devices.spec_vector(spec).shape == devices.spec_vector(devices.get("rtx3090")).shape
    cpu = devices.from_json(_write(tmp_path, {"slug": "epyc-t2", "kind": "cpu", "memory_gb": 8,
                                              "memory_bw_gbs": 20, "peak_fp32_tflops": 0.1}))
    assert cpu.name == "epyc-t2" and cpu.kind == "cpu"


@pytest.mark.parametrize("bad, message", [
    ({k: v for k, v in VALID.items() if k != "memory_bw_gbs"}, "missing required field"),
    ({**VALID, "memory_gb": -1}, "positive"),
    ({**VALID, "memory_gb": "lots"}, "positive number"),
    ({**VALID, "memory_gb": True}, "positive number"),
    ({**VALID, "peak_fp32_tflops": 40000}, "plausible range"),  # GFLOPS given as TFLOPS
    ({**VALID, "memory_bw_tbs": 1.0}, "unknown field"),
    ({**VALID, "kind": "tpu"}, "kind must be one of"),
    ({**VALID, "tdp_w": 300, "min_power_limit_w": 350}, "min_power_limit_w=350 is above tdp_w=300"),
    ({**VALID, "tdp_w": 300, "max_power_limit_w": 250}, "tdp_w=300 is above max_power_limit_w=250"),
    ({**VALID, "base_clock_mhz": 1800, "boost_clock_mhz": 1500}, "base_clock_mhz=1800 is above"),
    ([VALID], "JSON object"),
    ("{not json", "cannot read"),
])
def test_from_json_invalid(tmp_path, bad, message):
    with pytest.raises(devices.DeviceSpecError, match=message):
        devices.from_json(_write(tmp_path, bad))


def test_from_json_missing_file(tmp_path):
    with pytest.raises(devices.DeviceSpecError, match="cannot read"):
        devices.from_json(tmp_path / "absent.json")


@pytest.mark.parametrize("typed, slug", [
    ("h100", "h100-sxm5-80gb"), ("H100", "h100-sxm5-80gb"), ("a100", "a100-sxm4-80gb"),
    ("A100-80GB", "a100-sxm4-80gb"), ("3090", "rtx3090"), ("RTX 3090", "rtx3090"), ("rtx-4090", "rtx4090"),
    ("l4", "l4"), ("NVIDIA H100 80GB HBM3", "h100-sxm5-80gb"), ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
    ("Tesla T4", "t4"), ("h100 pcie", "h100-pcie-80gb"), ("t4", "t4")])
def test_device_names_as_users_type_them_resolve(typed, slug):
    assert devices.resolve(typed).slug == slug


def test_an_unresolvable_name_lists_the_nearest_choices():
    with pytest.raises(devices.UnknownDevice, match="could be titan-xp, titan-rtx, titan-v"):
        devices.resolve("titan")
    with pytest.raises(devices.UnknownDevice, match="did you mean .*a10g"):
        devices.resolve("a10x")
    with pytest.raises(devices.UnknownDevice, match="--device-spec"):
        devices.resolve("zzz")
