"""Batch consistency of predicted costs: no answer may get cheaper as the batch grows.

For one model in one setting a training step (and an inference pass, and the training memory) at
batch ``2b`` does all the work of batch ``b`` and more, so it costs at least as much; and below
the batches that fill the device it costs at most twice as much. A learned predictor does not
know this: it answers each batch on its own, and far from its labels' batches its answers bend
(the shipped RTX 3090 predictor's raw answers fell with batch in 51 of 160 adjacent batch pairs
of the sample models, ``python experiments/batch_consistency.py``; ResNet-50's AMP throughput kept
doubling from batch 32 to 256 where the GPU is full from about 64).

* On a GPU the shape of the batch curve comes from physics (:func:`moved`): the predictor answers
  at the batch its labels measure a model (:func:`trappm_ray.model.launch.anchor_batch`: the
  largest that fits), and every other batch is that answer times the step model's ratio
  (:mod:`trappm_ray.physics.step_model`: kernels at their fill of the GPU, host issue time
  overlapping them), which never more than doubles when the batch doubles, nor falls. Above the
  anchor (a batch that does not fit, or beyond the labels' batches) the network once answered
  itself, and its answer fell in throughput (ViT-B/16 on the RTX 3090: 365 img/s at 256, 340 at
  512; on an L4 300 -> 242).
* On a CPU, whose labels span batches 1-48, the answer at batch ``b`` is held to the envelope of
  the predictions at ``2b, 4b, ...`` up to the predictor's ``envelope_top`` (:func:`hold`; the
  lower quartile of its labels' batches, stored in its manifest by training:
  :func:`trappm_ray.model.launch.envelope_top`): from the top down, each value is clipped to
  ``[next / 2, next]``. On the project's own CPU labels (1,700 pairs at batches b and 2b) the
  time fell with batch in 13 pairs (noise) and more than doubled in 2 (training step) and 6
  (inference) of the 485 pairs at b < 4; above that caches make doubling super-linear more
  often, so the envelope stops there.
"""
from __future__ import annotations

from trappm_ray.physics.step_model import DEVICE_SCALE, MODES as STEP_MODES, device_scale

HELD = ("train_step_ms", "inference_ms", "train_memory_mb")  # costs that grow with batch
SCALED = ("", "_std", "_low", "_high")  # a target's value and interval move together
REPORT_CHANGE = 0.01  # relative change worth a note


def ladder(batch: int, top: int) -> list[int]:
    """Batches ``2b, 4b, ...`` up to the first at or above ``top`` (a predictor's
    ``envelope_top``; empty at or above it)."""
    out: list[int] = []
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


def moved(anchor_row: dict[str, float], batch: int, anchor: int, step, floors: dict[str, float]
          ) -> tuple[dict[str, float], list[str]]:
    """The answer at ``batch``: the physics step model there, with the GPU's kernel times
    corrected as the predictor's answer at ``anchor`` (``anchor_row``) says
    (:func:`trappm_ray.physics.step_model.device_scale`, within its ``DEVICE_SCALE``): the learned
    part corrects the device's efficiency where its labels are, physics carries it to the batch
    asked, the host's issue time included: below the anchor never above its answer, above it
    never below it nor above it in proportion to the batch. Where the predictor's answer lies
    beyond the bounds, the step model at the bound stands for it, at the anchor itself too
    (``batch == anchor``: otherwise the answer there is the predictor's). The interval moves with
    the value; never below the ``floors`` of the graph at ``batch``. The predictor itself is not
    asked at ``batch``: away from its labels' workloads its answer is what this replaces.

    Args:
        step: ``(batch, target) -> StepEstimate`` of the step model.
        floors: per target the least time of the graph at ``batch`` (ms).

    Returns:
        The row at ``batch`` (per moved target its value, interval and spread, the scale on the
        kernel times as ``<target>_device_scale``, and what else the anchor's row says of its
        derivation) and one note per target saying how it was derived.
    """
    row: dict[str, float] = {}
    out = []
    for t in STEP_MODES:
        if t not in anchor_row:
            continue
        if anchor_row[t] <= 0:  # a graph of no work: its floor (the host's issue time) answers
            row.update({t: floors.get(t, 0.0), f"{t}_std": 0.0})
            out.append(f"{t}: the graph does no work the roofline counts; the least time to issue its "
                       f"kernels answers: {row[t]:.4g} ms")
            continue
        scale = device_scale(step(anchor, t), anchor_row[t], DEVICE_SCALE)
        within = DEVICE_SCALE[0] < scale < DEVICE_SCALE[1]
        if batch == anchor and within:  # the predictor's own answer stands
            continue
        # the anchor's answer as physics holds it: where the learned answer lies beyond the bounds
        # (below the host's issue time: resnet10t at 64 px on an H100 read 3.2 ms a step at every
        # batch from 8 to 512, its kernels' issue alone 5.2 ms), the step model at the bound
        reference = anchor_row[t] if within else step(anchor, t).with_device_scale(scale)
        # a smaller batch costs no more than the anchor, a larger one at least as much and no
        # more than in proportion to the batch
        at_most = reference * max(batch / anchor, 1.0)
        at_least = reference if batch > anchor else 0.0
        after = max(min(step(batch, t).with_device_scale(scale), at_most), at_least, floors.get(t, 0.0))
        row.update({f"{t}{suffix}": anchor_row[f"{t}{suffix}"] * after / anchor_row[t]
                    for suffix in SCALED if f"{t}{suffix}" in anchor_row})
        row[f"{t}_device_scale"] = scale  # a setting move after this one keeps the same device
        if f"{t}_measured_batch" in anchor_row:  # the anchor's answer moved a measurement of this graph
            row.update({f"{t}_measured_batch": anchor_row[f"{t}_measured_batch"], f"{t}_anchor": anchor})
        why = (f"so that at batch {anchor} (the largest that fits this GPU, where its labels measure a "
               f"model) it reads the predictor's answer, {anchor_row[t]:.4g} ms" if within
               else f"the most a learned answer may move it: the predictor's answer at batch {anchor} (the "
               f"largest that fits this GPU), {anchor_row[t]:.4g} ms, lies further from physics than that")
        out.append(f"{t}: the step model at batch {batch}, its GPU kernel times x {scale:.3g}, {why}: {after:.4g} ms")
    return row, out


def notes(changed: dict[str, tuple[float, float]], batch: int, top: int) -> list[str]:
    """One line per target the envelope moved by more than :data:`REPORT_CHANGE`."""
    return [f"{t} held to the batch envelope of batches {batch}..{top} (a step costs no more than "
            f"at twice the batch and at least half of it): {before:.4g} -> {after:.4g}"
            for t, (before, after) in changed.items() if abs(after / before - 1) > REPORT_CHANGE]


__all__ = ["HELD", "ladder", "hold", "notes", "moved"]
