"""Checks every prediction passes before it is answered, beyond the physical floors
(:mod:`trappm_ray.physics.floors`): the training domain and costs no real job has.

A confident number for a model unlike anything the predictor saw misleads: a model far from the
training graphs is flagged and its interval widened (:mod:`trappm_ray.model.domain`); and costs
beyond any device (memory far above the largest GPU of the spec table, steps lasting longer than
a year) are flagged in words rather than returned as silent numbers.
"""
from __future__ import annotations

from trappm_ray import devices
from trappm_ray.graph import features
from trappm_ray.graph.featurize import Graph
from trappm_ray.model.domain import assess
from trappm_ray.model.manifest import Manifest

YEAR_MS = 365.25 * 24 * 3600 * 1e3
BEYOND_DEVICES = 10.0  # memory above 10x the largest device's is not a job anyone can run


def domain_of(manifest: Manifest, graph: Graph) -> dict:
    """How far ``graph`` is from the predictor's training graphs (see ``model.domain.assess``);
    not widening the intervals of a predictor whose every target's were calibrated on families
    held out (their residual quantiles name the ``folds``)."""
    calibrated = all("folds" in manifest.residual_quantiles.get(t, {}) for t in manifest.targets)
    return assess(manifest.domain, features.static_features(graph, manifest.feature_set), calibrated)


def absurdities(train_step_ms: float | None, train_memory_mb: float | None,
                inference_ms: float | None = None) -> list[str]:
    """Plain-words flags for costs no real training job has."""
    out = []
    if train_step_ms is not None and inference_ms is not None and inference_ms > train_step_ms:
        out.append(f"inference ({inference_ms:.4g} ms) predicted slower than a training step "
                   f"({train_step_ms:.4g} ms), which runs the same forward pass and more: at least one "
                   f"of the two is wrong for this model")
    largest = max((s.memory_gb or 0) for s in devices.load_specs().values()) * 1024
    if train_memory_mb is not None and train_memory_mb > BEYOND_DEVICES * largest:
        out.append(f"training memory {train_memory_mb / 1024:,.0f} GB is over {BEYOND_DEVICES:g}x "
                   f"the largest device in the spec table ({largest / 1024:,.0f} GB): the model "
                   f"cannot be trained as given")
    if train_step_ms is not None and train_step_ms > YEAR_MS:
        out.append(f"one training step would take {train_step_ms / YEAR_MS:,.0f} years: far outside "
                   f"anything measured, not a usable estimate")
    return out


__all__ = ["domain_of", "absurdities", "YEAR_MS"]
