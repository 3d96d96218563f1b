"""The predicted targets: the one definition of each, and which label column feeds it where.

A target is what a user asks about ("training memory"); a label column is what a harness
recorded. They differ by device kind: on a CPU the harness reads the process's resident memory
above its pre-model baseline, on a GPU the CUDA caching allocator and NVML. Training memory on a
GPU is the device memory in use (NVML: the allocator's reserved pool plus the CUDA context), the
quantity that decides whether a job fits a GPU or MIG slice (``docs/memory.md``).
"""
from __future__ import annotations

from dataclasses import dataclass

CPU, GPU = "cpu", "gpu"


@dataclass(frozen=True)
class Target:
    """One predicted quantity.

    Args:
        name: the target's name in predictions, manifests and result tables.
        unit: its unit (``ms``, ``MB``, ``W``).
        columns: device kind (``cpu`` / ``gpu``) -> the label column that measures it there; a
            kind that is missing has no measurement of it.
        reported: shown in predictions (the API, CLI, HTTP answer and batch output).
        batch_affine: grows about linearly in the batch size from a fixed part (weights,
            optimizer state), so regressors may predict it as ``a + b * batch``.
        meaning: one line for docs and reports.
    """

    name: str
    unit: str
    columns: dict[str, str]
    reported: bool = True
    batch_affine: bool = False
    meaning: str = ""

    def column(self, kind: str) -> str | None:
        """The label column of this target on a device of ``kind`` (None: not measured there)."""
        return self.columns.get(kind)


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("train_step_ms", "ms", {CPU: "train_step_ms", GPU: "train_step_ms"},
           meaning="one training step: forward, backward and optimizer step, per batch"),
    Target("train_memory_mb", "MB", {CPU: "mem_above_baseline_mb", GPU: "nvml_used_mb"},
           batch_affine=True,
           meaning="peak memory of training: CPU resident set above the process baseline; "
                   "GPU device memory in use (NVML)"),
    Target("inference_ms", "ms", {CPU: "inference_ms", GPU: "inference_ms"},
           meaning="one forward pass in eval mode without gradients, per batch"),
    Target("train_power_w", "W", {GPU: "power_w_mean"},
           meaning="mean board power during timed training steps (NVML)"),
)}
REPORTED = tuple(name for name, t in TARGETS.items() if t.reported)
BATCH_AFFINE = tuple(name for name, t in TARGETS.items() if t.batch_affine)


def device_kind(device: str | None) -> str:
    """``cpu`` or ``gpu`` for a label row's ``device`` column (``cpu``, ``cuda``, ``rocm``...)."""
    return CPU if (device or CPU) == CPU else GPU


def label_column(target: str, device: str | None) -> str | None:
    """The label column feeding ``target`` for rows measured on ``device``."""
    return TARGETS[target].column(device_kind(device))


def unit(target: str) -> str:
    return TARGETS[target].unit


__all__ = ["Target", "TARGETS", "REPORTED", "BATCH_AFFINE", "CPU", "GPU", "device_kind",
           "label_column", "unit"]
