"""Which graphs a labeled build needs: (architecture, resolution) tasks with their batch sizes.

A label row joins the graph of its (arch, resolution, batch_size). Two ways to list those keys:
from a label store's ok rows (:func:`trappm_ray.labels.label_join.label_tasks`, every device, through
:func:`from_keys`) or straight from the public
GPU sources (:func:`from_public_sources`: timm's benchmark CSVs, NeuSight's label file names,
ryujaehun's torchvision CSVs), which works before any label is imported. Each task also names
the model source that builds it: ``timm``, ``torchvision`` (arch ``torchvision_<name>``),
``hf`` (a transformers LM from a config; its resolution is the sequence length in tokens) or
``workload`` (a public measurement's own model, :mod:`trappm_ray.corpus.workload_models`).
"""
from __future__ import annotations

import csv
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from trappm_ray.corpus.text_models import GPT_SHAPE
from trappm_ray.corpus.torchvision_models import TORCHVISION_PREFIX
from trappm_ray.corpus.workload_models import WORKLOADS

log = logging.getLogger(__name__)

PUBLIC_ROOT = "../shared/data/public-gpu"
# build order: timm training first (the largest label set), then inference, LMs, torchvision
GROUPS = ("timm-train", "timm-infer", "hf", "torchvision", "other")
_NEUSIGHT_NAME = re.compile(r"^(?P<model>[A-Za-z0-9_.]+)-(?P<mode>train|inf)-(?P<seq>\d+)-(?P<batch>\d+)")


@dataclass(frozen=True)
class Task:
    """One export: an architecture at one resolution, featurized at ``batch_sizes``.

    Args:
        arch: the label's architecture name.
        resolution: image size in pixels, or sequence length for ``hf``.
        batch_sizes: every labeled batch size of this (arch, resolution), ascending.
        source: ``timm``, ``torchvision`` or ``hf``.
        group: one of :data:`GROUPS` (build order).
    """

    arch: str
    resolution: int
    batch_sizes: tuple[int, ...]
    source: str = "timm"
    group: str = "other"


def source_of(arch: str, hf_names: set[str] | frozenset = frozenset()) -> str:
    """The model source of a label architecture name (a GPT shape, ``gpt_h*_a*_l*``, is ``hf``)."""
    if arch.startswith(TORCHVISION_PREFIX):
        return "torchvision"
    if arch in hf_names or GPT_SHAPE.match(arch):
        return "hf"
    if arch in WORKLOADS:
        return "workload"
    return "timm"


def _merge(found: dict, arch: str, res: int, bs: int, source: str, group: str) -> None:
    key = (arch, res)
    if key not in found:
        found[key] = {"bs": set(), "source": source, "group": group}
    found[key]["bs"].add(bs)
    if GROUPS.index(group) < GROUPS.index(found[key]["group"]):
        found[key]["group"] = group


def _tasks(found: dict) -> list[Task]:
    tasks = [Task(a, r, tuple(sorted(v["bs"])), v["source"], v["group"])
             for (a, r), v in found.items()]
    return sorted(tasks, key=lambda t: (GROUPS.index(t.group), t.arch, t.resolution))


def _int(value) -> int | None:
    try:
        v = int(float(value))
    except (TypeError, ValueError):
        return None
    return v if v >= 1 else None


def timm_keys(root: str | Path, found: dict) -> None:
    """Add the (model, img_size, batch_size) of every readable row of timm's benchmark CSVs."""
    for path in sorted(Path(root, "timm").glob("benchmark-*.csv")):
        kind = "train" if "-train-" in path.name else "infer"
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                res, bs = _int(row.get(f"{kind}_img_size")), _int(row.get(f"{kind}_batch_size"))
                if row.get("model") and res and bs:
                    _merge(found, row["model"], res, bs, "timm", f"timm-{kind}")


def neusight_keys(root: str | Path, found: dict) -> None:
    """Add (model, seq, batch) from NeuSight's label file names (distributed runs included)."""
    for path in sorted(Path(root, "neusight", "label").glob("*/*.json")):
        m = _NEUSIGHT_NAME.match(path.name)
        if m:
            _merge(found, m["model"], int(m["seq"]), int(m["batch"]), "hf", "hf")


def torchvision_keys(root: str | Path, found: dict) -> None:
    """Add ryujaehun's torchvision models at 224 px, at each folder's batch size (default 12).

    Files without model columns (``dgx.csv``: a batch/GPU sweep of unnamed runs) are skipped.
    """
    import json

    for path in sorted(Path(root, "ryujaehun").rglob("*.csv")):
        cfg = path.parent / "config.json"
        batch = (_int(json.loads(cfg.read_text()).get("BATCH_SIZE")) if cfg.is_file() else None) or 12
        with open(path, newline="") as f:
            header = next(csv.reader(f), [])
        if "batchs" in header:
            continue
        for name in header:
            if re.fullmatch(r"[a-z][a-z0-9_]*", name or ""):
                _merge(found, TORCHVISION_PREFIX + name, 224, batch, "torchvision", "torchvision")


def from_public_sources(root: str | Path = PUBLIC_ROOT,
                        sources: tuple[str, ...] = ("timm", "neusight", "ryujaehun")) -> list[Task]:
    """Tasks for every key in the public GPU source files (see ``SOURCES.md`` there).

    Args:
        root: the ``public-gpu`` folder.
        sources: which of its folders to read.
    """
    found: dict = {}
    readers = {"timm": timm_keys, "neusight": neusight_keys, "ryujaehun": torchvision_keys}
    for s in sources:
        readers[s](root, found)
    return _tasks(found)


def extra_tasks(extra: tuple[str, ...], resolutions: tuple[int, ...], batch_sizes: tuple[int, ...],
                seq_lens: tuple[int, ...] = (128, 512)) -> list[Task]:
    """Unlabeled tasks of the non-timm sources, for the GAE's corpus (issue 23).

    Args:
        extra: any of ``hf`` (every text-model config), ``torchvision`` (every classification
            model, legacy exporter) and ``torchvision_dynamo`` (the same, dynamo exporter).
        resolutions: image sizes of torchvision models.
        batch_sizes: the graphs of each task.
        seq_lens: sequence lengths of text models (their ``resolution``).
    """
    from trappm_ray.corpus import text_models, torchvision_models

    tasks = []
    if "hf" in extra:
        tasks += [Task(n, s, tuple(batch_sizes), "hf", "hf") for n in text_models.config_names()
                  for s in seq_lens]
    for kind, dynamo in (("torchvision", False), ("torchvision_dynamo", True)):
        if kind in extra:
            tasks += [Task(a, r, tuple(batch_sizes), "torchvision", "torchvision")
                      for a in torchvision_models.list_classification_models(dynamo) for r in resolutions]
    return tasks


def from_keys(keys: Iterable[tuple[str, int, int, bool]], hf_names: set[str] | frozenset = frozenset()) -> list[Task]:
    """Tasks for labeled keys, each ``(arch, resolution, batch size, has a training label)``: a
    timm model with a training label is built in the ``timm-train`` group, else ``timm-infer``."""
    found: dict = {}
    for arch, res, bs, trained in keys:
        source = source_of(arch, hf_names)
        group = ({"hf": "hf", "torchvision": "torchvision", "workload": "other"}.get(source)
                 or ("timm-train" if trained else "timm-infer"))
        _merge(found, arch, int(res), int(bs), source, group)
    return _tasks(found)


__all__ = [
    "GROUPS",
    "PUBLIC_ROOT",
    "TORCHVISION_PREFIX",
    "Task",
    "from_keys",
    "from_public_sources",
    "neusight_keys",
    "source_of",
    "timm_keys",
    "torchvision_keys",
]
