"""Floor-ratio (reference) transfer: a GPU without labels predicted from a shipped GPU predictor's answer.

The shipped predictor of a *reference* GPU (the RTX 3090's, trained on its measured steps)
predicts the graph on its own device; the answer is multiplied by the ratio of the two devices'
roofline floors for the same graph and setting (:mod:`trappm_ray.physics.roofline`, Williams et al.,
CACM 2009). What the reference learned beyond the roofline (launches, framework overheads, fusion)
carries over; what the devices' specs change comes through the floor. Leave-one-device-out on timm's
inference rows (``docs/results-gpu.md``, "reference" rows) measures it against the spec model.

It answers only settings the reference predictor was trained on (precision, optimizer, memory
format), and text models only where the reference's labels hold some; anything else stays with the
spec model, as do targets the spec model has many rows of
the device for (:func:`keeps_own`: the RTX 4090's inference). On a much faster GPU a small workload
cannot finish before the host has issued its kernels: the transferred time is never below the
host's time to issue them (:data:`trappm_ray.physics.floors.LEAST_HOST_US_PER_KERNEL`), capped at
the reference's own answer. Away from the reference's labeled batches the answer is moved from
one at such a batch by the step model, as the reference's own answer is
(:mod:`trappm_ray.serving.batch_envelope`). Where the reference's labels
measured the very graph asked about, its measurement is moved instead of its predictor's answer
(:mod:`trappm_ray.model.anchors`).
"""
from __future__ import annotations

import math

import numpy as np

from trappm_ray import devices
from trappm_ray.model.anchors import MeasuredAnchors
from trappm_ray.model.device_features import KERNELS_COL
from trappm_ray.physics.floors import LEAST_HOST_US_PER_KERNEL
from trappm_ray.model.manifest import Manifest
from trappm_ray.model.options import trained_options
from trappm_ray.model.device_features import EAGER_TORCH2, static_input

TARGET_MODES = (("train_step_ms", "train"), ("inference_ms", "infer"))
TEXT_SOURCES = ("transformers",)  # label model sources of text models (NeuSight's LMs)


def keeps_own(spec_manifest: Manifest, slug: str, target: str) -> bool:
    """Whether the spec model keeps its own answer for device ``slug`` and ``target``: it was
    trained on at least its manifest's ``own_rows`` of them."""
    part = spec_manifest.boosters
    if part is None:
        return False
    rows = (part.lodo.get(target, {}).get("devices", {}).get(slug) or {}).get("rows", 0)
    return rows >= part.own_rows


def transfer_ms(ref_ms, floor_here, floor_there, kernels, mode: str):
    """Reference time ``ref_ms`` (floor ``floor_there``) moved to a device whose floor is
    ``floor_here``: scaled by the floor ratio, never below the least host time to issue ``kernels``
    graph kernels (capped at ``ref_ms``) nor below ``floor_here``. Works on floats and numpy arrays.

    Args:
        mode: ``train`` (a training step) or ``infer``.
    """
    target = dict((m, t) for t, m in TARGET_MODES)[mode]
    launch = np.minimum(kernels * LEAST_HOST_US_PER_KERNEL[target] / 1e3, ref_ms)
    return np.maximum(np.maximum(ref_ms * floor_here / floor_there, launch), floor_here)


def image_only(manifest: Manifest) -> bool:
    """Whether a predictor's labels hold image models only (its manifest lists their sources and
    none is a text one): what it learned does not carry to a text model."""
    sources = manifest.data.get("model_sources") or []
    return bool(sources) and not set(sources) & set(TEXT_SOURCES)


def covers(reference_manifest: Manifest, setting: dict, mode: str) -> bool:
    """Whether the reference predictor was trained on ``setting`` (the optimizer only matters
    for a training step)."""
    trained = trained_options(reference_manifest)
    fields = ("precision", "memory_format") + (("optimizer",) if mode == "train" else ())
    return all(setting.get(f) in trained.get(f, [setting.get(f)]) for f in fields)


def transferred_ms(reference, spec: devices.DeviceSpec, graphs: list, settings_list: list[dict],
                   targets: tuple[str, ...] = ("train_step_ms", "inference_ms"),
                   here: dict[str, list] | None = None, anchors: MeasuredAnchors | None = None
                   ) -> list[dict[str, float]]:
    """Per graph, ``{target: ms}`` on ``spec`` by reference transfer, for the ``targets`` and
    settings the reference covers (others absent). Never below ``spec``'s floor.

    Args:
        reference: a shipped :class:`~trappm_ray.model.predictor.Predictor` of a GPU in the spec table.
        spec: the device predicted. graphs: featurized graphs at their batch sizes.
        settings_list: per graph the resolved options (``precision``, ``optimizer``, ``memory_format``).
        here: per target, the graphs' :func:`~trappm_ray.model.roofline_inputs.static_input` on
            ``spec`` where the caller has them already (computed otherwise).
        anchors: the reference device's measurements (:mod:`trappm_ray.model.anchors`): a graph
            they hold (at a batch within 2x) moves its measured / floor ratio instead of the
            reference's answer, and its row carries ``{target}_measured_batch``.
    """
    ref_spec = devices.get(reference.manifest.device.spec or "")
    out: list[dict[str, float]] = [{} for _ in graphs]
    text_ok = not image_only(reference.manifest)
    wanted = [i for i, s in enumerate(settings_list)
              if any(t in targets and covers(reference.manifest, s, mode) for t, mode in TARGET_MODES)
              and (text_ok or not graphs[i].meta.get("token_ids"))]
    ref_rows = dict(zip(wanted, reference.predict_graphs([graphs[i] for i in wanted],
                                                         [settings_list[i] for i in wanted]))) if wanted else {}
    for i, ref_row in ref_rows.items():
        s = settings_list[i]
        for target, mode in TARGET_MODES:
            if target not in targets or target not in ref_row or not covers(reference.manifest, s, mode):
                continue
            on_spec = here[target][i] if here and target in here else \
                static_input(graphs[i], spec, s, mode, EAGER_TORCH2)
            there = static_input(graphs[i], ref_spec, s, mode, EAGER_TORCH2)
            if on_spec is None or there is None:
                continue
            ref_ms = ref_row[target]
            measured = anchors.lookup(graphs[i], target, s) if anchors is not None else None
            if measured is not None:
                ref_ms = measured["ratio"] * there[0]
                out[i][f"{target}_measured_batch"] = measured["batch_size"]
            out[i][target] = transfer_ms(ref_ms, on_spec[0], there[0], math.exp(on_spec[1][KERNELS_COL]), mode)
    return out


__all__ = ["TARGET_MODES", "TEXT_SOURCES", "image_only", "keeps_own", "transfer_ms", "covers",
           "transferred_ms"]
