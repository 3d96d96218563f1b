"""The GPU campaign's instruments: the machine's identity, NVML readings, step clocks and the
rows file (``rows.jsonl``: one JSON row per line, flushed as each is measured).

Runs on the GPU slot's machine: torch and nvidia-ml-py only, imported where they are read; the step
statistics and the host clock are the CPU harness's (:mod:`trappm_ray.labels.harness`).
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import statistics
import threading

from trappm_ray.labels.harness import WallEvent, spread
from trappm_ray.labels.machine import device_info, nvml_handle

ROWS_FILE = "rows.jsonl"
# What a row measures: every row has every one of these (None where the machine has no such reading:
# the CPU has no CUDA allocator and no NVML; a failed row has none).
MEASURED = (
    *(f"{t}{s}" for t in ("train_step_ms", "inference_ms") for s in ("", "_p10", "_p90", "_min", "_max")),
    "train_steps_timed", "inference_steps_timed", "forward_ms", "backward_ms", "optimizer_ms",
    "train_samples_per_s", "inference_samples_per_s", "cuda_max_allocated_mb", "cuda_max_reserved_mb",
    "nvml_used_mb", "leftover_mb", "power_w_mean", "power_w_max", "power_samples", "power_window_s",
    "energy_j", "inference_power_w_mean", "sm_clock_mhz", "first_step_ms", "wall_s")


def machine_info(device: str) -> dict:
    """The measuring machine (:func:`trappm_ray.labels.machine.device_info`: GPU name, driver, CUDA,
    torch and timm versions, hashed ids) and the transformers version; no CUDA context is made."""
    try:
        transformers = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        transformers = None
    return {**device_info(device), "transformers_version": transformers}


class NvmlSampler(threading.Thread):
    """Board power, device memory used and SM clock every ``interval`` s, and the energy counter
    at start and stop, while the timed steps run."""

    def __init__(self, interval: float = 0.02) -> None:
        import pynvml

        super().__init__(daemon=True)
        self.nvml, self.interval = pynvml, interval
        pynvml.nvmlInit()  # per process (a forked child inherits no NVML session); reference-counted
        self.handle = nvml_handle(pynvml)
        self.power: list[float] = []
        self.clock: list[float] = []
        self.used = 0
        self.done = threading.Event()
        self.energy0 = self._energy_mj()

    def _energy_mj(self) -> float | None:
        try:  # Volta and newer; older drivers or boards lack the counter
            return float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        except self.nvml.NVMLError:
            return None

    def run(self) -> None:
        while True:  # at least one reading, even when the steps end before this thread first runs
            self.power.append(self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0)  # mW -> W
            self.clock.append(float(self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM)))
            self.used = max(self.used, self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used)
            if self.done.wait(self.interval):
                return

    def stop(self) -> dict:
        self.done.set()
        self.join()
        end = self._energy_mj()
        energy = (end - self.energy0) / 1000.0 if end is not None and self.energy0 is not None else None
        return {"power_w_mean": statistics.fmean(self.power) if self.power else None,
                "power_w_max": max(self.power, default=None), "power_samples": len(self.power),
                "sm_clock_mhz": statistics.fmean(self.clock) if self.clock else None,
                "nvml_used_mb": self.used / 2**20, "energy_j": energy}


def emit(path: str, row: dict) -> None:
    """Append one row and make it durable before anything else runs."""
    with open(path, "a") as fh:
        fh.write(json.dumps(row, default=str) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


@contextlib.contextmanager
def sampled(cuda: bool):
    """NVML readings over the block (filled in on exit; empty on the CPU)."""
    readings: dict = {}
    sampler = NvmlSampler() if cuda else None
    if sampler:
        sampler.start()
    try:
        yield readings
    finally:
        if sampler:
            readings.update(sampler.stop())


def count_rows(path: str) -> int:
    if not os.path.exists(path):
        return 0
    with open(path) as fh:
        return sum(1 for line in fh if line.strip())


def read_rows(out_dir: str) -> list[dict]:
    """Rows of a run directory (a line cut off by a kill is dropped)."""
    rows = []
    with open(os.path.join(out_dir, ROWS_FILE)) as fh:
        for line in fh:
            with contextlib.suppress(json.JSONDecodeError):
                rows.append(json.loads(line))
    return [r for r in rows if isinstance(r, dict)]


__all__ = ["ROWS_FILE", "MEASURED", "machine_info", "NvmlSampler", "WallEvent", "spread", "emit", "sampled",
           "count_rows", "read_rows"]
