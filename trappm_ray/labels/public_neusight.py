"""Reader of NeuSight's whole-model LM latencies (``scripts/asplos/label`` of sitar-lab/NeuSight).

``label/<GPU>/<model>-<train|inf>-<seqlen>-<batch>[-<variant>].json`` holds ``e2e_latency`` (ms per
step), ``fw_latency`` and ``bwall_latency`` (its forward and backward parts; 0 where not split) and
``num_layer``. ``<model>`` names a Hugging Face config in ``DLmodel_configs/``. Variants:
``fusion`` (NeuSight's fused-operator run: ``compiled="fusion"``), ``dp4``/``tp4``/``pp4_<k>``
(4-GPU data/tensor/pipeline-parallel training; only ``e2e_latency`` is given).
"""
from __future__ import annotations

import json
import logging
import os
import re

from trappm_ray.labels.public_rows import NEUSIGHT, measurement

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(?P<model>[A-Za-z0-9_.]+)-(?P<mode>train|inf)-(?P<seq>\d+)-(?P<batch>\d+)"
                   r"(?:-(?P<variant>[A-Za-z0-9_]+))?\.json$")
_PARALLEL = re.compile(r"^(?P<kind>dp|tp|pp)(?P<gpus>\d+)(?:_\d+)?$")
# NeuSight's device folders (torch's device name, spaces as underscores) -> data/devices.csv slug.
DEVICES = {
    "NVIDIA_A100_80GB_PCIe": "a100-pcie-80gb", "NVIDIA_A100-PCIE-40GB": "a100-pcie-40gb",
    "NVIDIA_A100-SXM4-40GB": "a100-sxm4-40gb", "NVIDIA_H100_80GB_HBM3": "h100-sxm5-80gb",
    "NVIDIA_L4": "l4", "Tesla_V100-PCIE-32GB": "v100-pcie-32gb", "Tesla_T4": "t4",
    "Tesla_P100-PCIE-16GB": "p100-pcie-16gb", "Tesla_P4": "p4", "AMD_Instinct_MI100": "mi100",
    "AMD_Instinct_MI210": "mi210", "AMD_Instinct_MI250": "mi250",
}
METHOD = ("NeuSight collect_label.py (scripts/asplos): model built with transformers from the HF "
          "config DLmodel_configs/<arch>.json (float32, cuDNN TF32 off), random token inputs of "
          "batch x seqlen, timed by NeuSight's trace_graph(bench=True, one traced layer for all "
          "but Switch, num_layer recorded): e2e_latency in ms per step = fw_latency + bwall_latency "
          "(backward) for training, forward only for inference, no optimizer step")
METHOD_PARALLEL = ("NeuSight training run on {gpus} GPUs, {words} ({variant}), of the HF config model, "
                   "float32, forward + backward, no optimizer step, only e2e_latency (ms per step) "
                   "is given")
_WORDS = {"dp": "data parallel", "tp": "tensor parallel", "pp": "pipeline parallel"}


def _configs(folder: str) -> dict[str, dict]:
    """Model configs by name (``DLmodel_configs/<name>.json``); unreadable ones are left out."""
    out = {}
    cdir = os.path.join(folder, "DLmodel_configs")
    for name in sorted(os.listdir(cdir)) if os.path.isdir(cdir) else []:
        try:
            with open(os.path.join(cdir, name)) as f:
                out[name[:-len(".json")]] = json.load(f)
        except (OSError, ValueError) as e:
            log.warning("NeuSight config %s unreadable: %s", name, e)
    return out


def read_file(path: str, device_dir: str, configs: dict[str, dict]) -> tuple[list[dict], list[str]]:
    """The measurement of one NeuSight label file.

    Args:
        path: the JSON file.
        device_dir: its GPU folder name (``Tesla_T4``, ...).
        configs: model configs by name (see :func:`_configs`); a model without one is an error row.

    Returns:
        (measurements, issues) as :func:`trappm_ray.labels.public_timm.read_file`.
    """
    name = os.path.basename(path)
    source_file = f"scripts/asplos/label/{device_dir}/{name}"
    m = _NAME.match(name)
    if not m or device_dir not in DEVICES:
        return [], [f"{source_file}: file name or device not understood, skipped"]
    variant, gpus, parallelism, compiled = m["variant"], 1, "single", "none"
    if variant == "fusion":
        compiled = "fusion"
    elif variant and _PARALLEL.match(variant):
        p = _PARALLEL.match(variant)
        gpus, parallelism = int(p["gpus"]), f"{p['kind']}{p['gpus']}"
    elif variant:
        return [], [f"{source_file}: unknown variant {variant!r}, skipped"]
    model, seq = m["model"], int(m["seq"])
    train = m["mode"] == "train"
    error, data = None, {}
    try:
        with open(path) as f:
            data = json.load(f)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as e:
        error, data = f"unreadable label file: {e}", {}
    config = configs.get(model)
    if error is None and config is None:
        error = f"unknown model {model!r} (no DLmodel_configs/{model}.json)"
    fw, bw = _positive(data.get("fw_latency")), _positive(data.get("bwall_latency"))
    cols = dict(arch=model, family=(config or {}).get("model_type", model.split("_")[0]),
                resolution=seq, seq_len=seq, batch_size=int(m["batch"]), optimizer="none",
                memory_format="none", gpus=gpus, parallelism=parallelism, compiled=compiled,
                model_source="transformers", source_file=source_file, error=error,
                method=METHOD if gpus == 1 else METHOD_PARALLEL.format(
                    gpus=gpus, words=_WORDS[parallelism[:2]], variant=f"file suffix -{variant}"),
                forward_ms=fw if train else None, backward_ms=bw if train else None)
    label = "train_step_ms" if train else "inference_ms"
    return [measurement(NEUSIGHT, DEVICES[device_dir], "fp32", label, data.get("e2e_latency"), **cols)], []


def _positive(value) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if v > 0 else None


def read(folder: str) -> tuple[list[dict], list[str]]:
    """Measurements of every ``label/<GPU>/*.json`` under ``folder`` (NeuSight's copy)."""
    configs = _configs(folder)
    out, issues = [], []
    ldir = os.path.join(folder, "label")
    for device_dir in sorted(os.listdir(ldir)) if os.path.isdir(ldir) else []:
        ddir = os.path.join(ldir, device_dir)
        for name in sorted(os.listdir(ddir)) if os.path.isdir(ddir) else []:
            if name.endswith(".json"):
                found, bad = read_file(os.path.join(ddir, name), device_dir, configs)
                out += found
                issues += bad
            else:
                issues.append(f"scripts/asplos/label/{device_dir}/{name}: not a label file, skipped")
    return out, issues


__all__ = ["DEVICES", "METHOD", "read_file", "read"]
