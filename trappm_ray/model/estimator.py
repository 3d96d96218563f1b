"""The one interface every predictor that answers for a device plays.

Four classes answer for a device: :class:`~trappm_ray.model.network_predictor.NetworkPredictor`
(a shipped network, run in NumPy), :class:`~trappm_ray.model.spec_model.SpecPredictor` (the spec-based model bound to a
GPU) and two compositions of them in :mod:`trappm_ray.model.compositions`
(:class:`~trappm_ray.model.compositions.SettingMove`: a setting no label of the device holds;
:class:`~trappm_ray.model.compositions.TargetFill`: targets its device has no labels of). Serving,
the HTTP app and the batch job hold any of them through :class:`Estimator`, so a composition
that forgets a method fails the type checker (and ``isinstance`` in the tests), not a worker at
run time. (A training-side :class:`~trappm_ray.model.predictor.Predictor`, PyTorch, plays it too.)
Every one computes on the CPU: nothing to place on a device.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from trappm_ray.model.manifest import Device, Manifest

# Where the predictors shipped inside the package live; ``default`` answers when no device is named.
DEFAULT_DIR = Path(__file__).parents[1] / "predictors" / "default"


class PredictorError(ValueError):
    """A stored predictor is missing, incompatible or damaged."""


@runtime_checkable
class Estimator(Protocol):
    """A predictor bound to one device.

    Attributes:
        manifest: what it was trained on and how it answers (:class:`~trappm_ray.model.manifest.Manifest`).
    """

    manifest: Manifest

    @property
    def targets(self) -> tuple[str, ...]:
        """The targets it answers (``train_step_ms``, ``inference_ms``, ...)."""
        ...

    def check(self, setting: dict) -> None:
        """Raise ``errors.UnsupportedOption`` for a setting it cannot answer."""
        ...

    def predict_graphs(self, graphs: Sequence[Any], settings_list: list[dict]) -> list[dict[str, float]]:
        """One row per featurized graph: per target the value, ``_low``/``_high``/``_std`` and,
        where known, ``_floor``; ``settings_list`` holds each graph's resolved setting."""
        ...


def model_version(predictor: Estimator) -> str:
    """``name/version`` of a registered predictor, else ``name@<weights hash>``."""
    m = predictor.manifest
    name = m.name or "predictor"
    if m.version:
        return f"{name}/{m.version}"
    sha = m.network.weights_sha256 if m.network is not None else ""
    return f"{name}@{sha[:12]}" if sha else name


def device_of(predictor: Estimator) -> dict:
    """The manifest's device, with ``kind`` (cpu/cuda) made explicit: CPU slugs end in ``-tN``."""
    dev = predictor.manifest.device
    kind = dev.kind
    if kind not in ("cpu", "cuda", "rocm"):
        tail = dev.slug.rsplit("-", 1)[-1]
        kind = "cpu" if tail[:1] == "t" and tail[1:].isdigit() else "unknown"
    return {**dev.to_dict(), "kind": kind}


def names_device(dev: Device, device: str) -> bool:
    """Whether ``device`` (a slug, name or spec slug, any case) names a manifest's device; a
    spec slug names its precision regimes too (``rtx3090`` -> ``rtx3090-amp``)."""
    wanted, slug = device.lower(), dev.slug.lower()
    names = {slug, dev.name.lower(), (dev.spec or "").lower()}
    return wanted in names or slug.startswith(wanted + "-")


__all__ = ["DEFAULT_DIR", "PredictorError", "Estimator", "model_version", "device_of", "names_device"]
