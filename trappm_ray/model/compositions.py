"""Predictors composed of others: what a GPU predictor lacks, answered with another's help.

* :class:`SettingMove`: a setting no label of the device holds (AdamW, bf16, TF32, recompute on
  an RTX 3090 whose labels are AMP fp16 + SGD): the answer in the nearest setting the labels
  hold, times the physics step model's ratio between the two settings;
* :class:`TargetFill`: targets the device has no labels of (the RTX 4090: inference only), from
  the spec model of the same device.

All play :class:`~trappm_ray.model.estimator.Estimator`, as their parts do.
"""
from __future__ import annotations

from dataclasses import replace

from trappm_ray import devices, errors
from trappm_ray.model.launch import step_host_us
from trappm_ray.model.options import OPTIMIZERS, PRECISIONS, STEP_FIELDS, step_fields, trained_options
from trappm_ray.physics.memory import training_memory
from trappm_ray.physics.roofline import precision_refusal, roofline
from trappm_ray.physics.step_model import MODES, device_scale, step_time

# For a value no label holds, the values to move from, nearest first: the same arithmetic
# (autocast to another half type, the same optimizer without decoupled decay), then the nearest
# in bytes and kernels.
NEAREST = {
    "fp32": ("tf32", "amp-fp16", "amp-bf16"), "tf32": ("fp32", "amp-fp16", "amp-bf16"),
    "amp-fp16": ("amp-bf16", "fp16", "bf16", "fp32"), "amp-bf16": ("amp-fp16", "bf16", "fp16", "fp32"),
    "fp16": ("bf16", "amp-fp16", "amp-bf16", "fp32"), "bf16": ("fp16", "amp-bf16", "amp-fp16", "fp32"),
    "fp64": ("fp32", "tf32"),
    "adam": ("adamw", "sgd-momentum", "sgd", "none"), "adamw": ("adam", "sgd-momentum", "sgd", "none"),
    "sgd-momentum": ("sgd", "adam", "adamw", "none"), "sgd": ("sgd-momentum", "none", "adam", "adamw"),
    "none": ("sgd", "sgd-momentum", "adam", "adamw"),
}
MOVED = ("precision", "optimizer", *STEP_FIELDS)  # the fields the step model moves


def scaled(row: dict[str, float], t: str, ratio: float) -> dict[str, float]:
    """Target ``t`` of ``row`` with its spread and band, each times ``ratio``."""
    return {k: row[k] * ratio for k in (t, f"{t}_std", f"{t}_low", f"{t}_high") if k in row}


class SettingMove:
    """A GPU predictor answering a precision or optimizer none of its labels hold: its answer in
    the nearest setting they do hold (:data:`NEAREST`), times the ratio of the physics step model
    (:func:`trappm_ray.physics.step_model.step_time`) between the requested and that setting on
    this GPU at the batch asked. Physics carries the move (peaks and bytes of the precision, the
    optimizer's passes over the parameters); the learned answer keeps its level and its interval's
    width.

    A precision the GPU cannot run is refused with the reason (bf16 without bf16 units).

    Args:
        inner: the device's estimator (a shipped predictor, a composition, the spec model).
        spec: the GPU.
        held: option values to move from instead of the inner's trained ones (a spec-based
            answer moved from its reference's setting: :func:`trappm_ray.serving.routing.from_reference`).
    """

    def __init__(self, inner, spec: devices.DeviceSpec, held: dict[str, list] | None = None):
        self.inner, self.spec = inner, spec
        self.trained = {**trained_options(inner.manifest), **(held or {})}
        self.unheld = "its reference predictor's labels do not hold it" if held else "no label of this GPU holds it"
        options = {**self.trained, "precision": list(dict.fromkeys([*self.trained.get("precision", []), *PRECISIONS])),
                   "optimizer": list(dict.fromkeys([*self.trained.get("optimizer", []), *OPTIMIZERS]))}
        self.manifest = inner.manifest.replace(options=options, moves=tuple(STEP_FIELDS),
                                               name=f"{inner.manifest.name}+step-model")

    def note(self, setting: dict) -> str | None:
        """How an answer in ``setting`` was derived, when it was moved; None when it was not."""
        base = self.base(setting)
        moved = [f for f in MOVED if setting.get(f) != base.get(f)]
        if not moved:
            return None
        asked = ", ".join(f"{f} {setting[f]}" for f in moved)
        held = ", ".join(f"{f} {base.get(f, STEP_FIELDS.get(f))}" for f in moved)
        return (f"{asked}: {self.unheld}; the answer in {held} x the step model's ratio "
                f"between the two settings (peaks and bytes of the precision, the optimizer's passes "
                f"over the parameters, a second forward per checkpointed block, the passes per step; its "
                f"error where measurements hold both: docs/results-step-model.md, docs/results-campaign.md)")

    @property
    def targets(self) -> tuple[str, ...]:
        return self.inner.targets

    def base(self, setting: dict) -> dict:
        """``setting`` with each moved field at the nearest value the labels hold."""
        out = {k: v for k, v in setting.items() if k not in STEP_FIELDS}  # labels hold the defaults
        for field in ("precision", "optimizer"):
            held, value = self.trained.get(field) or [], setting.get(field)
            if value is None or value in held or not held:
                continue
            out[field] = next((v for v in NEAREST.get(value, ()) if v in held), held[0])
        return out

    def check(self, setting: dict) -> None:
        """Refuse a precision the GPU has no units or sourced peak for, then as the inner one."""
        refusal = precision_refusal(self.spec, setting.get("precision") or "fp32")
        if refusal is not None:
            raise errors.UnsupportedOption(refusal)
        self.inner.check(self.base(setting))

    def predict_graphs(self, graphs, settings_list: list[dict]) -> list[dict[str, float]]:
        """The inner rows in the base settings, each moved to the setting asked (:meth:`move`)."""
        bases = [self.base(s) for s in settings_list]
        rows = self.inner.predict_graphs(graphs, bases)
        for row, graph, asked, base in zip(rows, graphs, settings_list, bases):
            self.move(row, graph, asked, base)
        return rows

    def move(self, row: dict[str, float], graph, asked: dict, base: dict) -> None:
        """Scale ``row`` (an answer for ``graph`` in ``base``) in place to ``asked``: each time by
        the step model's ratio between the two settings at the graph's batch, the memory by the
        CUDA memory model's, the floors to the asked setting's. The ratio is taken at the batch
        asked: a learned answer moved to another batch first (:mod:`trappm_ray.serving.batch_envelope`)
        moves in its own setting, so the host's share of the step is the one at that batch. Both
        settings' kernels run on the device the answer reads: at the scale on the step model's
        kernel times the batch move found (``<target>_device_scale``), else the one that makes the
        step model read ``row`` (:func:`~trappm_ray.physics.step_model.device_scale`). Unscaled,
        the ratio took the host's share from another device than the answer's, and a TF32 step
        moved from AMP lost throughput as the batch grew (ResNet-50 on an H100: 0.42 ms a sample
        at batch 64, 0.50 at 128)."""
        if all(asked.get(f) == base.get(f) for f in MOVED):
            return
        host = step_host_us(self.inner.manifest.launch)
        ratios = {}
        for t, mode in MODES.items():
            if t not in row:
                continue
            held = step_time(graph, self.spec, base, mode, host)
            scale = row.get(f"{t}_device_scale") or (device_scale(held, row[t]) if row[t] > 0 else 1.0)
            ratios[t] = (step_time(graph, self.spec, asked, mode, host).with_device_scale(scale)
                         / held.with_device_scale(scale))
        if "train_memory_mb" in row:  # measured memory, moved by the CUDA memory model
            ratios["train_memory_mb"] = _memory_mb(graph, asked) / _memory_mb(graph, base)
        for t, ratio in ratios.items():
            row.update(scaled(row, t, ratio))
        for t, mode in MODES.items():  # the floor of the asked setting, not the base's
            if f"{t}_floor" in row:
                row[f"{t}_floor"] *= _roofline_ms(graph, self.spec, asked, mode) / _roofline_ms(graph, self.spec, base, mode)


# Where a setting's answer is held at a setting doing more of the same work (:func:`held_at`): the
# field, the value asked, the value it is held at, and why the one is never slower than the other.
HELD_AT = {("precision", "tf32"): ("fp32", "TF32 (fp32 with its matrix products on tensor cores)"),
           ("optimizer", "none"): ("sgd", "a step without an optimizer (plain SGD's, less its update)")}


def holding(setting: dict) -> dict[str, tuple[str, str]]:
    """The fields of ``setting`` whose answer is held at more work (:data:`HELD_AT`):
    ``{field: (value asked, value held at)}``."""
    return {f: (v, HELD_AT[(f, v)][0]) for f, v in setting.items() if isinstance(v, str) and (f, v) in HELD_AT}


def held_at(row: dict[str, float], above: dict[str, float], asked: dict[str, str]) -> list[str]:
    """Scale ``row`` (an answer in the ``asked`` values of :data:`HELD_AT`'s fields) in place down
    to ``above`` (the same model's answer with those fields at the values :data:`HELD_AT` names) per
    time it exceeds: the two rest on different learned answers or routes (TF32 moved from the AMP
    reference, fp32 the spec model's own: an L4's EfficientNet-B0 read 1.9x its fp32 step; an
    A100's fp32 ConvNeXt-T step without an optimizer, the spec model's own from rows without one,
    read 0.4% above its SGD one, moved from SGD-momentum), and the one never does more work than
    the other. Returns the note where it held."""
    held = []
    for t in MODES:
        if t in row and t in above and row[t] > above[t] > 0:
            row.update(scaled(row, t, above[t] / row[t]))
            held.append(t)
    if not held:
        return []
    whats = [HELD_AT[(f, v)] for f, v in asked.items()]
    return [f"{', '.join(held)}: held at this model's answer in {', '.join(f'{f} {w[0]}' for f, w in zip(asked, whats))}, "
            f"which {' and '.join(w[1] for w in whats)} is never slower than; the two rest on different derivations"]


def _roofline_ms(graph, spec: devices.DeviceSpec, setting: dict, mode: str) -> float:
    """The roofline floor of ``setting`` (recompute and accumulation add work; the floor of the
    plain step stays a floor of theirs)."""
    return roofline(graph, spec, setting.get("precision") or "fp32", mode, setting.get("optimizer") or "adam").total_ms


def _memory_mb(graph, setting: dict) -> float:
    """The CUDA memory model's device memory for ``setting`` (MB)."""
    return training_memory(graph, setting.get("precision") or "fp32", setting.get("optimizer") or "adam",
                           **step_fields(setting)).device_used / 2**20


class TargetFill:
    """A shipped GPU predictor completed, for the targets its device has no labels of (the RTX
    4090: inference only), by the spec-based predictor of the same device. A setting the shipped
    predictor was not trained on is moved by physics (:class:`SettingMove` around this), never by
    the spec model's ratio between two settings: its rows hold the precisions and optimizers on
    other devices and from other sources (fp16, fp32 and no optimizer on older GPUs, AMP with
    SGD-momentum from timm), and that ratio read an RTX 3090's ResNet-50 step 2% slower in pure
    fp16 than in AMP, and an RTX 4090's ConvNeXt-T 20% slower without an optimizer than with SGD.

    Args:
        shipped: the device's :class:`~trappm_ray.model.predictor.Predictor`.
        spec_predictor: the :class:`~trappm_ray.model.spec_model.SpecPredictor` bound to the device.
    """

    def __init__(self, shipped, spec_predictor):
        self.shipped, self.spec_predictor = shipped, spec_predictor
        self.filled = tuple(t for t in spec_predictor.targets if t not in shipped.targets)
        how = spec_predictor.manifest.device.note or "the spec-based predictor"
        note = f"{', '.join(self.filled)}: no labels of this device; {how}"
        self.manifest = shipped.manifest.replace(
            device=replace(shipped.manifest.device, note=note), targets=self.targets,
            launch={**spec_predictor.manifest.launch, **shipped.manifest.launch},
            name=f"{shipped.manifest.name}+{spec_predictor.manifest.name}")

    @property
    def targets(self) -> tuple[str, ...]:
        return (*self.shipped.targets, *self.filled)

    def check(self, setting: dict) -> None:
        """As :meth:`SpecPredictor.check`: a precision the device has no roofline for is refused."""
        self.spec_predictor.check(setting)

    def predict_graphs(self, graphs, settings_list: list[dict]) -> list[dict[str, float]]:
        """The shipped predictor's rows, with the spec-based predictor's for the filled targets."""
        rows = self.shipped.predict_graphs(graphs, settings_list)
        for row, other in zip(rows, self.spec_predictor.predict_graphs(graphs, settings_list)):
            row.update({k: v for k, v in other.items()
                        if any(k == t or k.startswith(f"{t}_") for t in self.filled)})
        return rows


__all__ = ["NEAREST", "SettingMove", "TargetFill", "HELD_AT", "held_at", "holding", "scaled"]
