"""The physics answer of a GPU predictor and how far its learned answer may move it.

A GPU predictor's network learns log(measured / roofline floor) from its labels; on a family
unlike any it was trained on it can read a step several times slower than physics allows (a
multi-resolution convnet of dense convolutions read 7.6x the step model on the RTX 3090, where
its labels' dense convnets sit at 0.9-1.6x). The step model (:mod:`trappm_ray.physics.step_model`)
carries an answer to any graph; what it misses differs by kind of kernel (cuDNN's dense
convolutions run near it, grouped convolutions and data movement far slower).

Per predictor, on its own label rows, the ratio measured / step model is regressed on the
graph's shares of GPU time per kernel class (:func:`trappm_ray.physics.kernel_classes.device_shares`),
a linear quantile regression without intercept, so each class gets its own log factor and a
graph's factor is the time-weighted mix of its classes':

* at the median: the **physics answer**, the step model with per-class efficiencies, which
  extrapolates to an unseen family by construction;
* at a low and a high quantile (:data:`QUANTILES`): the **bounds** no answer leaves.

The answer is the learned one (its share :attr:`CorrectionBounds.share` of a geometric blend
with the physics answer: 1 as shipped) held within the bounds. Where the two disagree by more
than :attr:`CorrectionBounds.flag`, or the bound holds the answer, the answer says it is out of
domain and its interval spans the bounds and, where the predictor's intervals were calibrated on
families held out, the band of the flagged answers there (:func:`trappm_ray.evaluate.unseen.family_out_quantiles`).

Measured on the RTX 3090's training steps with families held out (``jobs/evaluate_unseen.py``,
``docs/results-unseen.md``; channels-last rows moved from NCHW: :mod:`trappm_ray.model.layout`):
the shipped GNN recipe on five folds of families 12.6% MAPE, held within the bounds 12.3%; the
physics answer alone 16.1%; blending the two does not pay against the GNN (learned share 0.7:
12.3%, 0.5: 12.9%), though it does against the boosters (each family alone 16.5% -> 14.4% at
0.5). As a detector of answers off by more than 50% the flag catches 62% of them at 14.1% false
alarms.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trappm_ray import devices
from trappm_ray.model.intervals import has_group, quantile_offsets
from trappm_ray.model.launch import step_host_us
from trappm_ray.model.manifest import Manifest
from trappm_ray.model.layout import MOVED_FORMAT, LayoutFactors
from trappm_ray.physics.kernel_classes import CLASSES, device_shares, layout_shares
from trappm_ray.physics.step_model import MODES, step_time

QUANTILES = (0.05, 0.95)  # the bounds: 2.5-97.5% and 10-90% did no better (eba9a02's experiment)
SHARE = 1.0  # the learned answer's share of its blend with the physics answer (blending did not pay)
# learned / physics beyond 1.5x either way: out of domain. With families held out the shipped GNN's
# answers stand 1.3-1.5x from physics on 11% of rows that are right within 50% and on one row that
# is not (1.3x: recall 54.5%, false alarms 18.2%; 1.5x: 51.5%, 12.0%): docs/results-unseen.md.
FLAG = math.log(1.5)
# A predictor without layout factors (:mod:`trappm_ray.model.layout`) answers a channels-last
# training step directly; one whose graph has grouped convolutions is out of domain whatever the
# learned answer: the RTX 3090's labels (PyTorch 1.10-1.12) measure such steps from 0.6x to 16x
# their NCHW time, by the kernel the library picks (experiments/nhwc_layout.py).
LAYOUT_RISK_TARGETS = ("train_step_ms",)
LAYOUT_WHY = ("grouped convolutions in channels-last layout, whose training steps the labels (PyTorch 1.10-1.12) "
              "measured at 0.6x to 16x their NCHW time, by the kernel the library picks")


@dataclass(frozen=True)
class CorrectionBounds:
    """Per kernel class the log factors on the step model: the physics answer's and the bounds.

    Args:
        mid, low, high: per class of :data:`~trappm_ray.physics.kernel_classes.CLASSES`, the log
            of the ratio measured / step model at the median and the low and high quantile.
        share: the learned answer's share of its geometric blend with the physics answer.
        flag: log of the learned / physics ratio beyond which an answer is out of domain.
        quantiles: the bounds' quantiles.
        rows: label rows fitted.
    """

    mid: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    share: float = SHARE
    flag: float = FLAG
    quantiles: tuple[float, float] = QUANTILES
    rows: int = 0

    def physics(self, shares: np.ndarray) -> float:
        """The factor on the step model of the physics answer for a graph of these class shares."""
        return math.exp(float(np.asarray(shares, np.float64) @ np.asarray(self.mid)))

    def factors(self, shares: np.ndarray) -> tuple[float, float]:
        """(low, high) factors on the step model for a graph of these class shares (the physics
        answer's factor always within them)."""
        s = np.asarray(shares, np.float64)
        lo, hi, mid = (float(s @ np.asarray(v)) for v in (self.low, self.high, self.mid))
        return math.exp(min(lo, hi, mid)), math.exp(max(lo, hi, mid))

    def to_dict(self) -> dict:
        return {"classes": list(CLASSES), "mid": list(self.mid), "low": list(self.low), "high": list(self.high),
                "share": self.share, "flag": self.flag, "quantiles": list(self.quantiles), "rows": self.rows}

    @classmethod
    def from_dict(cls, d: dict) -> CorrectionBounds:
        if tuple(d["classes"]) != CLASSES:
            raise ValueError(f"correction bounds of classes {d['classes']}, this code has {list(CLASSES)}")
        return cls(tuple(d["mid"]), tuple(d["low"]), tuple(d["high"]), float(d["share"]), float(d["flag"]),
                   (float(d["quantiles"][0]), float(d["quantiles"][1])), int(d.get("rows", 0)))


def layout_risk(target: str, shares: np.ndarray, memory_format: str | None) -> bool:
    """Whether an answer of ``target`` for a graph of these class ``shares`` in ``memory_format``
    is out of domain by its layout alone (:data:`LAYOUT_RISK_TARGETS`)."""
    return (target in LAYOUT_RISK_TARGETS and memory_format == "nhwc"
            and float(np.asarray(shares)[CLASSES.index("grouped-conv")]) > 0)


def out_of_domain(learned, physics, answer, blended, flag: float = FLAG):
    """Whether an answer is out of domain: the learned answer stands more than ``flag`` (log)
    from the physics answer, or the bound moved the ``blended`` one to ``answer`` (scalars or
    arrays alike)."""
    return (np.abs(np.log(np.asarray(learned) / np.asarray(physics))) > flag) | (np.asarray(answer) != np.asarray(blended))


def widened(answer, low, high, bound_low, bound_high, band: tuple[float, float] | None = None):
    """The interval of an out-of-domain ``answer``: its own (``low``, ``high``), the class bounds
    and ``band`` (log offsets: the flagged answers' residuals on families held out) around it
    (scalars or arrays alike)."""
    lo, hi = band or (0.0, 0.0)
    return (np.minimum(np.minimum(low, bound_low), np.asarray(answer) * math.exp(lo)),
            np.maximum(np.maximum(high, bound_high), np.asarray(answer) * math.exp(hi)))


def make_up(shares: np.ndarray, top: int = 3) -> str:
    """The largest classes' shares in words: ``conv 71%, pointwise 22%, reduction 5%``."""
    order = np.argsort(-np.asarray(shares))[:top]
    return ", ".join(f"{CLASSES[i]} {100 * shares[i]:.0f}%" for i in order if shares[i] >= 0.01)


def hold(row: dict[str, float], target: str, step_ms: float, shares: np.ndarray, bounds: CorrectionBounds,
         batch: int | None = None, flagged_band: tuple[float, float] | None = None, layout: str = "") -> str:
    """Blend ``row[target]`` (a learned answer, with ``_std``/``_low``/``_high``) with the physics
    answer for a graph of these class ``shares`` and hold it within the ``bounds`` on the step
    model (``step_ms``); out of domain (or by its ``layout``, the reason in words: :func:`layout_risk`,
    :meth:`~trappm_ray.model.layout.LayoutFactors.out_of_domain`), the interval spans the
    bounds and ``flagged_band`` (log offsets around the answer: the residuals of flagged answers
    on families held out). Returns the note saying how the answer (at ``batch``, where named) was derived."""
    lo, hi = bounds.factors(shares)
    learned, physics = row[target], step_ms * bounds.physics(shares)
    if learned <= 0 or step_ms <= 0:  # a graph of views and constants: no kernel to bound
        return f"{target}: the graph does no work the step model counts; the learned answer stands"
    blended = (learned if bounds.share >= 1 else
               math.exp(bounds.share * math.log(learned) + (1 - bounds.share) * math.log(physics)))
    after = min(max(blended, lo * step_ms), hi * step_ms)
    for suffix in ("", "_std", "_low", "_high"):
        if f"{target}{suffix}" in row:
            row[f"{target}{suffix}"] *= after / learned
    basis = (f"physics ({physics:.4g} ms: the step model, {step_ms:.4g} ms, x {physics / step_ms:.3g} for its kernels, "
             f"{make_up(shares)} of the GPU time)")
    how = (f"{target}{f' at batch {batch}' if batch else ''}: {after:.4g} ms, the learned answer"
           + (f" ({learned:.4g} ms) blended with {basis}, the learned share {bounds.share:g}" if bounds.share < 1
              else f"{'' if after == learned else f' {learned:.4g} ms held to the bound'}; {basis}"))
    far = bool(out_of_domain(learned, physics, after, blended, bounds.flag))
    if not (far or layout):
        return how
    low, high = (float(v) for v in widened(after, row.get(f"{target}_low", after), row.get(f"{target}_high", after),
                                          lo * step_ms, hi * step_ms, flagged_band))
    row[f"{target}_low"], row[f"{target}_high"] = low, high
    why = (f"the learned answer is {learned / physics:.3g} x physics, and no label row made of these kernels stood "
           f"that far from it (they stood at {lo:.2g}-{hi:.2g} x the step model)" if far else layout)
    return (f"{how}; out of domain: {why}: the answer {'rests on physics and ' if far else ''}may be off by up to "
            f"{max(high / after, after / low):.2g} x "
            f"(the interval widened to {low:.4g}-{high:.4g} ms)")


def held(row: dict[str, float], graph, manifest: Manifest, spec: devices.DeviceSpec | None, setting: dict) -> list[str]:
    """:func:`hold` every step target of a GPU predictor's ``row`` (its learned answers for
    ``graph`` in the resolved ``setting`` on ``spec``) by the ``manifest``'s bounds; one note per
    target, how it was derived. A channels-last answer the predictor moved from its NCHW one
    (:mod:`trappm_ray.model.layout`) is held on the step model moved alike, and says so. A
    predictor without bounds (fitted before them) answers unchanged."""
    notes = []
    z = float(setting.get("interval_z", 1.96))
    for t, d in manifest.correction.items():
        if spec is None or t not in row or t not in MODES:
            continue
        step = step_time(graph, spec, setting, MODES[t], step_host_us(manifest.launch)).total_ms
        band = (quantile_offsets(manifest.residual_quantiles, t, z, "flagged")
                if has_group(manifest.residual_quantiles, t, "flagged") else None)
        shares = device_shares(graph, spec, setting["precision"])
        why, moved = "", ""
        if t in manifest.layout and setting.get("memory_format") == MOVED_FORMAT:
            layout = LayoutFactors.from_dict(manifest.layout[t])
            kinds = layout_shares(graph, spec, setting["precision"])
            factor = layout.factor(kinds)
            step *= factor
            moved = layout.note(t, kinds, factor)
            why = layout.why(kinds)
        elif layout_risk(t, shares, setting.get("memory_format")):
            why = LAYOUT_WHY
        note = hold(row, t, step, shares, CorrectionBounds.from_dict(d), int(graph.static["batch_size"]), band, why)
        notes += [moved, note] if moved else [note]
    return notes


__all__ = ["QUANTILES", "SHARE", "FLAG", "LAYOUT_RISK_TARGETS", "LAYOUT_WHY", "CorrectionBounds", "held", "hold", "layout_risk", "make_up",
           "out_of_domain", "widened"]
