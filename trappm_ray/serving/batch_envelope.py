"""Batch consistency of predicted costs: no answer may get cheaper as the batch grows.

For one model in one setting a training step (and an inference pass, and the training memory) at
batch ``2b`` does all the work of batch ``b`` and more, so it costs at least as much; and below
the batches that fill the device it costs at most twice as much (an under-occupied device runs a
larger batch at no worse a rate per sample). On this project's own CPU labels (1,700 pairs of one
model at batches b and 2b) the time fell with batch in 13 pairs (noise) and more than doubled in
2 (training step) and 6 (inference) of the 485 pairs at b < 4; above that, caches make doubling
super-linear more often, so on CPUs the envelope stops there. A learned predictor does not know
this: the GPU labels are each model's largest batch (timm's benchmarks: 64-1024), and far below
it the raw predictions of the shipped RTX 3090 predictor fell with batch in 51 of 160 adjacent
batch pairs of the sample models (``python experiments/batch_consistency.py``).

The answer at batch ``b`` is therefore held to the envelope of the predictions at ``2b, 4b, ...``
up to a top batch inside the device's labeled range: from the top down, each value is clipped to
``[next / 2, next]``. Values at or above the top are left as predicted. Clipping keeps every value
above the roofline floor, which is itself monotone in batch.

On a GPU a workload below the labeled range (roofline floor per kernel under the labels' 5th
percentile, :mod:`trappm_ray.model.launch`) is first rebuilt from the answer at the least batch
``b x 2^k`` inside the range (the *anchor*): the host's time to issue the kernels plus the rest of
the anchor's answer scaled by the floor. The envelope then has nothing left to clip there.
"""
from __future__ import annotations

from trappm_ray import errors
from trappm_ray.model import launch

# Smallest batch of the ladder's top: the lower end of the labeled batches of each device kind
# (RTX 3090 training labels: lower quartile 64, inference 512; the CPU labels span 1-48 with
# quartile 4): answers there are interpolations, not extrapolations.
LADDER_TOP = {"cuda": 128, "rocm": 128, "cpu": 4}
HELD = ("train_step_ms", "inference_ms", "train_memory_mb")  # costs that grow with batch
SCALED = ("", "_std", "_low", "_high")  # a target's value and interval move together
REPORT_CHANGE = 0.01  # relative change worth a note


def ladder(batch: int, kind: str) -> list[int]:
    """Batches ``2b, 4b, ...`` up to the first at or above the top of ``kind`` (empty at or
    above it, or for an unknown device kind)."""
    top, out = LADDER_TOP.get(kind, 0), []
    while batch * 2 ** len(out) < top:
        out.append(batch * 2 ** (len(out) + 1))
    return out


def hold(row: dict[str, float], above: list[dict[str, float]]) -> dict[str, tuple[float, float]]:
    """Clip ``row`` (a ``predict_graphs`` row at batch b) in place to the envelope of ``above``
    (the rows at 2b, 4b, ... in that order).

    Returns:
        ``{target: (before, after)}`` for each target whose value changed.
    """
    changed = {}
    for t in HELD:
        if t not in row or any(t not in r for r in above):
            continue
        cap = None
        for r in reversed(above):
            cap = r[t] if cap is None else min(max(r[t], cap / 2), cap)
        if cap is None:
            continue
        before = row[t]
        after = min(max(before, cap / 2), cap)
        if after != before and before > 0:
            for suffix in SCALED:
                if f"{t}{suffix}" in row:
                    row[f"{t}{suffix}"] *= after / before
            changed[t] = (before, after)
    return changed


def row_profile(row: dict[str, float], target: str, prof: dict) -> dict:
    """``prof`` with the lower workload edge ``row`` carries for ``target`` (a transferred answer
    carries its reference's edge in its own device's units), else ``prof`` itself."""
    edge = row.get(f"{target}_edge_us")
    return prof if edge is None or not prof else {**prof, "floor_us_per_kernel_p05": edge}


def anchors(batch: int, row: dict[str, float], next_row: dict[str, float] | None, profiles: dict
            ) -> dict[str, int]:
    """Per target whose workload in ``row`` (a prediction at ``batch``; ``next_row`` the one at
    twice it, if predicted) lies below the edge of its launch profile (``profiles``: a predictor
    manifest's ``launch``), the batch to rebuild it from."""
    found = {}
    for t, prof in profiles.items():
        prof = row_profile(row, t, prof)
        floor, kernels = row.get(f"{t}_floor"), row.get(f"{t}_kernels")
        if floor is None or kernels is None or not launch.below_edge(floor, kernels, prof):
            continue
        floor_2x = (next_row or {}).get(f"{t}_floor", 2 * floor)
        b = launch.anchor_batch(batch, floor, floor_2x, kernels, prof)
        if b > batch:
            found[t] = b
    return found


def anchor_answers(ladders: dict[int, tuple[int, list[dict[str, float]]]], profiles: dict, graph_at, setting_of,
                   predictor) -> dict[int, dict[str, tuple[int, dict[str, float]]]]:
    """The predictions at every item's :func:`anchors`, in one pass of ``predictor``.

    Args:
        ladders: per item, its batch and its rows (the prediction, then at twice the batch, ...).
        profiles: the predictor manifest's ``launch``.
        graph_at: ``(item, batch) -> graph``; an ``errors.ModelError`` (a batch the file cannot
            be re-bound to) leaves that anchor out, and the answer as it was.
        setting_of: ``item -> setting`` (the resolved options the item was predicted in).

    Returns:
        ``{item: {target: (batch, prediction row)}}``.
    """
    graphs: dict[tuple[int, int], tuple] = {}
    for i, (batch, rows) in ladders.items():
        for t, b in anchors(batch, rows[0], (rows[1:] or [None])[0], profiles).items():
            try:
                graphs.setdefault((i, b), (graph_at(i, b), setting_of(i), []))[2].append(t)
            except errors.ModelError:
                continue
    rows = predictor.predict_graphs([g for g, *_ in graphs.values()], [s for _, s, _ in graphs.values()]) \
        if graphs else []
    out: dict[int, dict] = {}
    for ((i, b), (*_, targets)), r in zip(graphs.items(), rows):
        out.setdefault(i, {}).update({t: (b, r) for t in targets})
    return out


def rebuild(rows: list[dict[str, float]], anchored: dict[str, tuple[int, dict[str, float]]], profiles: dict
            ) -> list[str]:
    """Rebuild in place each target of ``rows`` (a prediction and its ladder) whose workload lies
    below its launch profile's edge from the answer at its anchor (``anchored``: one item of
    :func:`anchor_answers`; :func:`launch.extrapolate`), its interval moving with it.

    Returns:
        One note per target of the first row moved by more than :data:`REPORT_CHANGE`.
    """
    out = []
    for t, (batch, anchor_row) in anchored.items():
        top, top_floor = anchor_row.get(t), anchor_row.get(f"{t}_floor")
        for i, r in enumerate(rows):
            prof = row_profile(r, t, profiles[t])
            floor, kernels = r.get(f"{t}_floor"), r.get(f"{t}_kernels")
            if (top is None or floor is None or kernels is None or t not in r
                    or not launch.below_edge(floor, kernels, prof) or floor >= top_floor):
                continue
            before = r[t]
            after = max(launch.extrapolate(top, top_floor, floor, kernels, prof["host_us_per_kernel"]), floor)
            for suffix in SCALED:
                if f"{t}{suffix}" in r:
                    r[f"{t}{suffix}"] *= after / before
            if i == 0 and abs(after / before - 1) > REPORT_CHANGE:
                out.append(f"{t} below the workloads of the labels (floor {floor * 1e3 / kernels:.3g} us per "
                           f"kernel, labels from {prof['floor_us_per_kernel_p05']:.3g}): {kernels:.0f} kernels x "
                           f"{prof['host_us_per_kernel']:.3g} us host time each (least measured: "
                           f"{' '.join(map(str, prof['host_row']))}) + the answer at batch {batch} scaled by "
                           f"the floor: {before:.4g} -> {after:.4g}")
    return out


def notes(changed: dict[str, tuple[float, float]], batch: int, top: int) -> list[str]:
    """One line per target the envelope moved by more than :data:`REPORT_CHANGE`."""
    return [f"{t} held to the batch envelope of batches {batch}..{top} (a step costs no more than "
            f"at twice the batch and at least half of it): {before:.4g} -> {after:.4g}"
            for t, (before, after) in changed.items() if abs(after / before - 1) > REPORT_CHANGE]


__all__ = ["LADDER_TOP", "HELD", "ladder", "hold", "notes", "row_profile", "anchors", "anchor_answers", "rebuild"]
