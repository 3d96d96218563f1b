"""The censored check of the memory model on timm's public GPU training rows.

timm's ``benchmark.py`` starts a training benchmark at one batch size and, on a CUDA error
(out-of-memory), retries with the next size of ``timm.utils.decay_batch_step`` (two steps per
power of two: 512, 384, 256, 192, 128, 96, ...). A row therefore proves two things about
training memory at its (model, resolution): its batch fitted on the card, and, when below the
starting size, the previous size of that sequence did not. Neither is a measured value, so the
check counts rows on each side rather than computing an error.
"""
from __future__ import annotations

import json
import logging
import math
import os
from collections import defaultdict

from trappm_ray.physics.graph_walk import folded_norm_mask, walk
from trappm_ray.physics.memory import MiB, training_memory

log = logging.getLogger(__name__)

START_BATCH = 512
# timm's 2022 RTX 3090 runs: native AMP (float16 autocast), timm's "sgd" optimizer (SGD,
# momentum 0.9, Nesterov, weight decay 1e-4), torch 1.10-1.12 (zero_grad keeps gradients,
# single-tensor optimizer loops), CUDA 11.3 (no lazy module loading).
TIMM_2022 = dict(precision="amp-fp16", optimizer="sgd-momentum", grads_set_to_none=False,
                 foreach=False, context="eager")
FEATURIZE_BATCH = 32  # graphs are featurized once at this batch and scaled to each row's batch


def decay_sequence(start: int = START_BATCH, intra_steps: int = 2) -> list[int]:
    """Batch sizes timm tries, largest first: power-of-two floors split into ``intra_steps``."""
    seq, b = [start], start
    while b > 1:
        base = 2 ** int(math.log2(b - 1))
        step = max(base // intra_steps, 1)
        b = base + ((b - base - 1) // step) * step
        seq.append(b)
    return seq


def previous_size(batch: int, start: int = START_BATCH) -> int | None:
    """The size tried just before ``batch`` (None for the starting size or a size off-sequence)."""
    seq = decay_sequence(start)
    if batch not in seq or batch == seq[0]:
        return None
    return seq[seq.index(batch) - 1]


def load_skeletons(folder: str) -> dict:
    """``{(arch, resolution): path}`` of the ``<arch>@<res>.onnx`` files in ``folder``."""
    out = {}
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        if name.endswith(".onnx") and "@" in name:
            arch, res = name[:-5].rsplit("@", 1)
            out[(arch, int(res))] = os.path.join(folder, name)
    return out


def _predict_model(path: str, batches: list[int], settings: dict) -> dict:
    """device_used (bytes) at each batch for one skeleton: featurize once, walk once, scale."""
    from trappm_ray.graph.featurize import featurize

    graph = featurize(path, batch_size=FEATURIZE_BATCH)
    mask = folded_norm_mask(path)
    walked = walk(graph, mask if len(mask) == graph.num_nodes else None)
    return {b: training_memory(graph, batch_size=b, walked=walked, **settings).device_used
            for b in batches}


def censored_check(rows: list[dict], skeletons: dict, capacity_bytes: float = 24 * 2**30,
                   settings: dict | None = None, cache_path: str | None = None) -> dict:
    """Check predicted device memory against what each training row proves.

    Args:
        rows: dicts with ``model``, ``img_size``, ``batch_size`` (and ``source``).
        skeletons: ``{(model, img_size): onnx path}``; rows without one are counted as skipped.
        capacity_bytes: the card's memory (RTX 3090: 24 GiB).
        settings: keyword arguments of :func:`training_memory` (default: ``TIMM_2022``).
        cache_path: JSON-lines file of per-model predictions, reused when present.

    Returns:
        ``{"summary": shares and counts, "failures_by_family": ..., "rows": per-row results}``.
    """
    from trappm_ray.corpus.zoo import family_of

    settings = dict(TIMM_2022 if settings is None else settings)
    need: dict[tuple, set] = defaultdict(set)
    for r in rows:
        key = (r["model"], r["img_size"])
        if key in skeletons:
            need[key].add(r["batch_size"])
            if (p := previous_size(r["batch_size"])) is not None:
                need[key].add(p)
    preds: dict[tuple, dict] = {}
    tag = json.dumps(settings, sort_keys=True)
    if cache_path and os.path.exists(cache_path):
        with open(cache_path) as f:
            for d in map(json.loads, f):
                if d.get("settings") == tag:
                    preds[(d["model"], d["img_size"])] = {int(k): v for k, v in d["pred"].items()}
    for key in sorted(need):
        if key in preds and need[key] <= set(preds[key]):
            continue
        try:
            preds[key] = _predict_model(skeletons[key], sorted(need[key]), settings)
        except Exception as e:  # noqa: BLE001 - a graph that cannot be featurized is a skip
            log.warning("%s@%s: %s", *key, e)
            preds[key] = {}
        if cache_path:
            with open(cache_path, "a") as f:
                f.write(json.dumps({"model": key[0], "img_size": key[1], "settings": tag,
                                    "pred": preds[key]}) + "\n")
    out_rows, fams = [], defaultdict(lambda: {"rows": 0, "fit_fail": 0, "nofit_rows": 0,
                                              "nofit_fail": 0})
    for r in rows:
        p = preds.get((r["model"], r["img_size"]), {})
        b, prev = r["batch_size"], previous_size(r["batch_size"])
        if b not in p:
            out_rows.append({**r, "status": "no_graph"})
            continue
        fam = family_of(r["model"])
        fits = p[b] <= capacity_bytes
        row = {**r, "family": fam, "status": "ok", "pred_mib": p[b] / MiB, "fits_ok": fits,
               "prev_batch": prev}
        fams[fam]["rows"] += 1
        fams[fam]["fit_fail"] += int(not fits)
        if prev is not None and prev in p:
            row.update(pred_prev_mib=p[prev] / MiB, nofit_ok=p[prev] > capacity_bytes)
            fams[fam]["nofit_rows"] += 1
            fams[fam]["nofit_fail"] += int(p[prev] <= capacity_bytes)
        out_rows.append(row)
    ok = [r for r in out_rows if r["status"] == "ok"]
    red = [r for r in ok if "nofit_ok" in r]
    summary = {
        "rows": len(rows), "rows_checked": len(ok), "rows_without_graph": len(rows) - len(ok),
        "models_checked": len({(r["model"], r["img_size"]) for r in ok}),
        "fits_side_share": sum(r["fits_ok"] for r in ok) / max(len(ok), 1),
        "reduced_rows": len(red),
        "nofit_side_share": sum(r["nofit_ok"] for r in red) / max(len(red), 1),
        "both_sides_share": sum(r["fits_ok"] and r.get("nofit_ok", True) for r in ok)
        / max(len(ok), 1),
        "capacity_mib": capacity_bytes / MiB, "settings": settings,
    }
    failing = {f: v for f, v in sorted(fams.items()) if v["fit_fail"] or v["nofit_fail"]}
    return {"summary": summary, "failures_by_family": failing, "rows": out_rows}
