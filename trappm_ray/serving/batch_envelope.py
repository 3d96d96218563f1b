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
batch pairs of the sample models (``python benchmarks/batch_consistency.py``).

The answer at batch ``b`` is therefore held to the envelope of the predictions at ``2b, 4b, ...``
up to a top batch inside the device's labeled range: from the top down, each value is clipped to
``[next / 2, next]``. Values at or above the top are left as predicted. Clipping keeps every value
above the roofline floor, which is itself monotone in batch.
"""
from __future__ import annotations

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


def notes(changed: dict[str, tuple[float, float]], batch: int, top: int) -> list[str]:
    """One line per target the envelope moved by more than :data:`REPORT_CHANGE`."""
    return [f"{t} held to the batch envelope of batches {batch}..{top} (a step costs no more than "
            f"at twice the batch and at least half of it): {before:.4g} -> {after:.4g}"
            for t, (before, after) in changed.items() if abs(after / before - 1) > REPORT_CHANGE]


__all__ = ["LADDER_TOP", "HELD", "ladder", "hold", "notes"]
