"""A step in channels-last (NHWC) layout as the NCHW answer times a factor per kind of kernel.

The RTX 3090's labels (timm, PyTorch 1.10-1.12) measure 871 (model, resolution, batch) training
steps in both layouts: ResNet-50 runs 0.68x its NCHW step in NHWC, a ResNeXt-50 32x4d 0.78x, an
NFNet, a ResNeSt, a RepVGG-g4 or a Visformer 2.2-3.8x, an EfficientNet-B0 with 16-channel groups
16x. What decides it is the kernel the library picks per layout: dense and depthwise
convolutions and grouped ones of up to four channels per group have fast channels-last kernels,
grouped ones of more channels per group and group normalizations do not. A network answering the
NHWC row directly learned that per family and missed it on families it never saw (109 of the 121
answers off by more than 1.5x with families held out were NHWC: ``experiments/nhwc_layout.py``).

So the learned answer is taken in NCHW, where it carries over between families, and moved to
NHWC by ``factor(shares) = sum_k share_k * f_k``: the graph's share of GPU time in each
:data:`~trappm_ray.physics.kernel_classes.LAYOUT_KINDS` kind times that kind's NHWC / NCHW
factor, fitted on the rows measured in both layouts (:mod:`trappm_ray.train.layout_fit`). The
factor is a weighted mean of the kinds' factors, so no graph moves further than its slowest kind
was measured to. The interval of a moved answer is read from the residuals of moved answers on
families held out (``moved_values``: :mod:`trappm_ray.model.intervals`) where the predictor was
calibrated on them, else widens by the factor's own error on families held out (``band``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trappm_ray.physics.kernel_classes import LAYOUT_KINDS

MOVED_FORMAT = "nhwc"  # the layout answered through a move; NCHW is the one the learned answer is taken in
# A kind the library runs this much slower in channels-last is one whose factor rests on a few
# families and varied most between them (NF-RegNets' 8-channel groups 1.0-3.1x, EfficientNet-B0s
# with 8- or 16-channel groups and group norms 5.7-16x); a move with more than SLOW_SHARE of its
# time in such kinds is out of domain (flag recall and false alarms: docs/results-unseen.md).
SLOW, SLOW_SHARE = 1.5, 0.05


@dataclass(frozen=True)
class LayoutFactors:
    """One target's NHWC / NCHW factor per layout kind, as a manifest stores it.

    Attributes:
        factors: per :data:`LAYOUT_KINDS` kind, its NHWC time over its NCHW time.
        band: log offsets (2.5%, 97.5%) of the measured over the moved factor with each family's
            rows held out of the fit: how far the move alone has been off.
        rows, families: the pairs measured in both layouts the factors were fitted on.
        source: the labels, in words (device, library versions).
    """

    factors: tuple[float, ...]
    band: tuple[float, float]
    rows: int
    families: int
    source: str = ""

    def factor(self, shares) -> float:
        """The NHWC / NCHW factor of a graph of these :data:`LAYOUT_KINDS` ``shares``."""
        return float(np.dot(np.asarray(shares, float), self.factors))

    def slow_share(self, shares) -> float:
        """The share of GPU time in kinds that run more than :data:`SLOW` x slower in channels-last."""
        return float(np.dot(np.asarray(shares, float), np.asarray(self.factors) > SLOW))

    def out_of_domain(self, shares) -> bool:
        """Whether the move of a graph of these ``shares`` is out of domain (:data:`SLOW_SHARE`)."""
        return self.slow_share(shares) > SLOW_SHARE

    def to_dict(self) -> dict:
        return {"kinds": list(LAYOUT_KINDS), "factors": list(self.factors), "band": list(self.band),
                "rows": self.rows, "families": self.families, "source": self.source}

    @classmethod
    def from_dict(cls, d: dict) -> LayoutFactors:
        if tuple(d["kinds"]) != LAYOUT_KINDS:
            raise ValueError(f"layout factors of kinds {d['kinds']}, this code has {list(LAYOUT_KINDS)}")
        return cls(tuple(float(f) for f in d["factors"]), (float(d["band"][0]), float(d["band"][1])),
                   int(d["rows"]), int(d["families"]), str(d.get("source", "")))

    def move(self, row: dict[str, float], target: str, shares, widen: bool = True) -> float:
        """Scale ``row``'s ``target`` (an NCHW answer with ``_std``/``_low``/``_high``) in place to
        NHWC; with ``widen`` (an interval not calibrated on moved answers) it widens by
        :attr:`band`. Returns the factor."""
        f = self.factor(shares)
        for suffix in ("", "_std", "_low", "_high"):
            if f"{target}{suffix}" in row:
                row[f"{target}{suffix}"] *= f
        if widen and f"{target}_low" in row:
            row[f"{target}_low"] *= math.exp(min(self.band[0], 0.0))
            row[f"{target}_high"] *= math.exp(max(self.band[1], 0.0))
        return f

    def note(self, target: str, shares, f: float) -> str:
        """How a moved answer was derived, in words."""
        top = np.argsort(-np.asarray(shares))[:3]
        kinds = ", ".join(f"{LAYOUT_KINDS[k]} {100 * shares[k]:.0f}% (x{self.factors[k]:.2g})" for k in top if shares[k] >= 0.01)
        return (f"{target}: channels-last, the NCHW answer x {f:.3g}, the NHWC / NCHW factor of its kernels ({kinds}; "
                f"fitted on {self.rows} rows of {self.families} families measured in both layouts"
                f"{', ' + self.source if self.source else ''}; on families held out the measured factor was "
                f"{math.exp(self.band[0]):.2f}-{math.exp(self.band[1]):.2f}x this one)")

    def why(self, shares) -> str:
        """Why the move of a graph of these ``shares`` is out of domain, in words; empty when it is not."""
        if not self.out_of_domain(shares):
            return ""
        return (f"{100 * self.slow_share(shares):.0f}% of its GPU time is in kernels the library runs more than {SLOW:g}x "
                "slower in channels-last, by factors that varied most between the families measured")


__all__ = ["MOVED_FORMAT", "SLOW", "SLOW_SHARE", "LayoutFactors"]
