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

from trappm_ray.physics.folded_norm import folded_norm_mask
from trappm_ray.physics.graph_walk import walk
from trappm_ray.physics.memory import (
    CONTEXT_BYTES,
    FRAGMENTATION,
    MODEL_VERSION,
    MiB,
    training_memory,
)

log = logging.getLogger(__name__)

START_BATCH = 512
# timm's 2022 RTX 3090 runs: native AMP (float16 autocast), timm's "sgd" optimizer (SGD,
# momentum 0.9, Nesterov, weight decay 1e-4), torch 1.10-1.12 (zero_grad keeps gradients,
# single-tensor optimizer loops), CUDA 11.3 (no lazy module loading).
TIMM_2022 = {"precision": "amp-fp16", "optimizer": "sgd-momentum", "grads_set_to_none": False,
             "foreach": False, "context": "eager"}
FEATURIZE_BATCH = 32  # graphs are featurized once at this batch and scaled to each row's batch
# A row whose parameter count differs from the exported graph's by more than this is of another
# model than the one timm exports today under that name (renamed/remapped checkpoints).
PARAMS_TOLERANCE = 0.05


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


# The allocator-fragmentation assumption is the least certain term: the check also reports the
# shares under these alternatives (docs/memory.md), never picking one from the results.
FRAGMENTATION_GRID = (0.0, 0.05, 0.10, 0.15)


def _predict_model(path: str, batches: list[int], settings: dict) -> dict:
    """device_used (bytes) per fragmentation assumption and batch for one skeleton: featurize
    once, walk once, scale to each batch."""
    from trappm_ray.graph.featurize import featurize

    graph = featurize(path, batch_size=FEATURIZE_BATCH)
    mask = folded_norm_mask(path)
    walked = walk(graph, mask if len(mask) == graph.num_nodes else None, arithmetic=True)
    out = {str(f): {b: training_memory(graph, batch_size=b, walked=walked, fragmentation=f,
                                       **settings).device_used for b in batches}
           for f in FRAGMENTATION_GRID}
    out["params"] = float(graph.static.get("params", 0.0))
    return out


def _context_bytes(settings: dict) -> float:
    ctx = settings.get("context", "lazy")
    return float(CONTEXT_BYTES[ctx] if isinstance(ctx, str) else ctx)


def _evaluate(rows: list[dict], preds: dict, fkey: str, capacity: float) -> tuple:
    """Per-row verdicts, per-family failure counts and the shares for one assumption set."""
    out_rows = []
    fams: dict = defaultdict(lambda: {"rows": 0, "fit_fail": 0, "nofit_rows": 0, "nofit_fail": 0})
    for r in rows:
        p_all = preds.get((r["model"], r["img_size"]), {})
        p = p_all.get(fkey, {})
        b, prev = r["batch_size"], previous_size(r["batch_size"])
        if b not in p:
            out_rows.append({**r, "status": "no_graph"})
            continue
        want = r.get("param_count_m", float("nan")) * 1e6
        if not math.isnan(want) and abs(p_all["params"] - want) > PARAMS_TOLERANCE * want:
            out_rows.append({**r, "status": "param_mismatch", "graph_params": p_all["params"]})
            continue
        fam = r.get("family") or "unknown"
        fits = p[b] <= capacity
        row = {**r, "family": fam, "status": "ok", "pred_mib": p[b] / MiB, "fits_ok": fits,
               "prev_batch": prev}
        fams[fam]["rows"] += 1
        fams[fam]["fit_fail"] += int(not fits)
        if prev is not None and prev in p:
            row.update(pred_prev_mib=p[prev] / MiB, nofit_ok=p[prev] > capacity)
            fams[fam]["nofit_rows"] += 1
            fams[fam]["nofit_fail"] += int(p[prev] <= capacity)
        out_rows.append(row)
    ok = [r for r in out_rows if r["status"] == "ok"]
    red = [r for r in ok if "nofit_ok" in r]
    summary = {
        "rows": len(rows), "rows_checked": len(ok),
        "rows_without_graph": sum(r["status"] == "no_graph" for r in out_rows),
        "rows_param_mismatch": sum(r["status"] == "param_mismatch" for r in out_rows),
        "models_checked": len({(r["model"], r["img_size"]) for r in ok}),
        "fits_side_share": sum(r["fits_ok"] for r in ok) / max(len(ok), 1),
        "reduced_rows": len(red),
        "nofit_side_share": sum(r["nofit_ok"] for r in red) / max(len(red), 1),
        "both_sides_share": sum(r["fits_ok"] and r.get("nofit_ok", True) for r in ok)
        / max(len(ok), 1),
        "capacity_mib": capacity / MiB,
    }
    return out_rows, fams, summary


def censored_check(rows: list[dict], skeletons: dict, capacity_bytes: float = 24 * 2**30,
                   settings: dict | None = None, cache_path: str | None = None) -> dict:
    """Check predicted device memory against what each training row proves.

    Args:
        rows: dicts with ``model``, ``img_size``, ``batch_size`` (optional ``param_count_m``:
            the row's parameters in millions, checked against the graph's; optional ``family``,
            which the failures are counted by).
        skeletons: ``{(model, img_size): onnx path}``; rows without one are counted as skipped.
        capacity_bytes: the card's memory (RTX 3090: 24 GiB).
        settings: keyword arguments of :func:`training_memory` (default: ``TIMM_2022``).
        cache_path: JSON-lines file of per-model predictions, reused when present.

    Returns:
        ``{"summary": shares and counts, "failures_by_family": ..., "rows": per-row results}``.
    """
    settings = dict(TIMM_2022 if settings is None else settings)
    need: dict[tuple, set] = defaultdict(set)
    for r in rows:
        key = (r["model"], r["img_size"])
        if key in skeletons:
            need[key].add(r["batch_size"])
            if (p := previous_size(r["batch_size"])) is not None:
                need[key].add(p)
    preds: dict[tuple, dict] = {}
    tag = json.dumps({**settings, "model_version": MODEL_VERSION}, sort_keys=True)
    if cache_path and os.path.exists(cache_path):
        with open(cache_path) as f:
            for d in map(json.loads, f):
                if d.get("settings") == tag:
                    preds[(d["model"], d["img_size"])] = {
                        k: (v if k == "params" else {int(b): x for b, x in v.items()})
                        for k, v in d["pred"].items()}
    for key in sorted(need):
        if key in preds and need[key] <= set(preds[key].get(str(FRAGMENTATION), {})):
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
    fkey = str(FRAGMENTATION)
    out_rows, fams, summary = _evaluate(rows, preds, fkey, capacity_bytes)
    summary["settings"] = {**settings, "fragmentation": FRAGMENTATION}
    # Sensitivity to the two least certain constants: fragmentation and the CUDA context.
    summary["sensitivity"] = []
    for f in FRAGMENTATION_GRID:
        for ctx in ("eager", "lazy"):
            shift = CONTEXT_BYTES[ctx] - _context_bytes(settings)
            s_ = _evaluate(rows, preds, str(f), capacity_bytes - shift)[2]
            summary["sensitivity"].append({"fragmentation": f, "context": ctx, **{
                k: s_[k] for k in ("fits_side_share", "nofit_side_share", "both_sides_share")}})
    failing = {f: v for f, v in sorted(fams.items()) if v["fit_fail"] or v["nofit_fail"]}
    return {"summary": summary, "failures_by_family": failing, "rows": out_rows}
