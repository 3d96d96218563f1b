"""What a GPU draws while each kind of kernel runs: a power probe to run on a GPU slot.

The power model (:mod:`trappm_ray.physics.power`) gives a busy GPU one draw whatever its kernels
do. The H200's two readings (``data/measurements/h200-2026-11-27``: a bf16 GEMM at the 700 W
cap, a copy at 472 W) and the per-model bias of its answers on the campaign's rows (ResNet-50
14% low, GPT-2 small 16% high: ``docs/results-power.md``) say the draw depends on the kernel.
This module runs one kind of kernel at a time, back to back for a few seconds, while NVML samples
the board: per kind, its achieved rate (TFLOP/s and TB/s by its own count of work and bytes),
mean and peak board power, SM clock and energy. ``tiny`` issues one-element kernels from Python,
so the GPU waits on the host between them as in a host-bound step: the draw of a GPU kept awake,
not idle; ``idle`` samples it with nothing issued after that.

On the GPU machine, after the shard (about two minutes)::

    PYTHONPATH=. python3 jobs/gpu_campaign.py --power-kernels default --out $OUT/power
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from trappm_ray.labels.campaign_instruments import machine_info, sampled

log = logging.getLogger(__name__)

POWER_FILE = "power_kernels.json"
SECONDS, WARM_S = 6.0, 1.0  # sampled per kind, after this long running it unsampled (the board's ramp)


@dataclass(frozen=True)
class Probe:
    """One kind of kernel: its dtype and shapes at full size and in the CPU dry run.

    Attributes:
        name: the kind (``gemm-bf16``, ``depthwise-fp16``, ...).
        op: ``gemm``, ``conv``, ``depthwise``, ``layernorm``, ``softmax``, ``gelu``, ``copy``,
            ``tiny`` or ``idle``.
        dtype: torch dtype name (``float32`` with ``tf32`` set: TF32 products).
        size, dry_size: the shape parameter (a GEMM's n, a convolution's batch, elements of a
            pointwise op) on a GPU and on the CPU.
        channels_last: a convolution's input and weights in NHWC.
        tf32: matrix products and convolutions in TF32 (``allow_tf32``).
    """

    name: str
    op: str
    dtype: str = "float16"
    size: int = 0
    dry_size: int = 0
    channels_last: bool = False
    tf32: bool = False


PROBES = {p.name: p for p in (
    Probe("gemm-bf16", "gemm", "bfloat16", 8192, 64), Probe("gemm-fp16", "gemm", "float16", 8192, 64),
    Probe("gemm-tf32", "gemm", "float32", 8192, 64, tf32=True), Probe("gemm-fp32", "gemm", "float32", 8192, 64),
    Probe("conv-fp16-nchw", "conv", "float16", 64, 1), Probe("conv-fp16-nhwc", "conv", "float16", 64, 1, True),
    Probe("depthwise-fp16", "depthwise", "float16", 64, 1), Probe("layernorm-fp16", "layernorm", "float16", 1 << 26, 4096),
    Probe("softmax-fp16", "softmax", "float16", 1 << 26, 4096), Probe("gelu-fp16", "gelu", "float16", 1 << 28, 4096),
    Probe("copy", "copy", "float32", 1 << 28, 4096), Probe("tiny", "tiny", "float32", 1, 1),
    Probe("idle", "idle"))}
DRY_RUN = ("gemm-bf16", "conv-fp16-nhwc", "depthwise-fp16", "layernorm-fp16", "copy", "tiny", "idle")


def build(torch, probe: Probe, device: str, dry: bool) -> tuple[Callable[[], object], float, float]:
    """The probe's kernel as a call, with its floating-point operations and bytes moved per call."""
    dt, n = getattr(torch, probe.dtype), probe.dry_size if dry else probe.size
    width = torch.tensor([], dtype=dt).element_size()
    if probe.op == "gemm":
        a, b = torch.randn(n, n, device=device, dtype=dt), torch.randn(n, n, device=device, dtype=dt)
        return (lambda: a @ b), 2.0 * n ** 3, 3.0 * n * n * width
    if probe.op in ("conv", "depthwise"):  # a ResNet stage's 3x3 at 56 px; depthwise: 512 channels alone
        c, hw = 256 if probe.op == "conv" else 512, 8 if dry else 56
        groups = 1 if probe.op == "conv" else c
        fmt = torch.channels_last if probe.channels_last else torch.contiguous_format
        x = torch.randn(n, c, hw, hw, device=device, dtype=dt).to(memory_format=fmt)
        w = torch.randn(c, c // groups, 3, 3, device=device, dtype=dt).to(memory_format=fmt)
        flops = 2.0 * n * c * hw * hw * (c // groups) * 9
        return (lambda: torch.nn.functional.conv2d(x, w, padding=1, groups=groups)), flops, \
            (2.0 * n * c * hw * hw + w.numel()) * width
    if probe.op in ("layernorm", "softmax", "gelu"):
        rows = max(n // 4096, 1)
        x = torch.randn(rows, 4096, device=device, dtype=dt)
        f = {"layernorm": lambda: torch.nn.functional.layer_norm(x, (4096,)),
             "softmax": lambda: torch.softmax(x, -1), "gelu": lambda: torch.nn.functional.gelu(x)}[probe.op]
        return f, 0.0, 2.0 * x.numel() * width
    if probe.op == "copy":
        src = torch.randn(n, device=device, dtype=dt)
        dst = torch.empty_like(src)
        return (lambda: dst.copy_(src)), 0.0, 2.0 * n * width
    if probe.op == "tiny":
        one = torch.zeros(1, device=device)
        return (lambda: one.add_(1)), 0.0, 0.0
    if probe.op == "idle":
        return (lambda: time.sleep(0.01)), 0.0, 0.0
    raise ValueError(f"unknown probe op {probe.op!r}")


def measure(torch, probe: Probe, device: str, dry: bool, seconds: float = SECONDS, warm_s: float = WARM_S) -> dict:
    """``probe``'s kernel issued back to back for ``warm_s`` unsampled, then ``seconds`` sampled:
    calls, achieved rates and the NVML readings (none on the CPU)."""
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = probe.tf32
    try:
        call, flops, nbytes = build(torch, probe, device, dry)

        def loop(duration: float) -> tuple[int, float]:
            calls, start = 0, time.perf_counter()
            while time.perf_counter() - start < duration:
                for _ in range(1 if probe.op == "idle" else 8):  # a few per check of the clock
                    call()
                calls += 1 if probe.op == "idle" else 8
                if cuda and calls % 64 == 0:
                    sync()  # the queue stays short: the clock measures what ran
            sync()
            return calls, time.perf_counter() - start

        loop(warm_s)
        with sampled(cuda) as readings:
            calls, elapsed = loop(seconds)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old
    return {"kind": probe.name, "op": probe.op, "dtype": probe.dtype, "tf32": probe.tf32,
            "channels_last": probe.channels_last, "calls": calls, "seconds": elapsed,
            "tflops": flops * calls / elapsed / 1e12, "tbytes_per_s": nbytes * calls / elapsed / 1e12,
            **readings}


def run_power_kernels(kinds: list[str], out_dir: str, device: str = "cuda", seconds: float = SECONDS,
                      warm_s: float = WARM_S) -> list[dict]:
    """Each kind of :data:`PROBES` in ``kinds`` measured in this process (an unknown or failing one
    becomes an entry with its error), written to ``<out_dir>/power_kernels.json`` after each."""
    import torch  # the GPU machine's; this module is not imported by the product

    os.makedirs(out_dir, exist_ok=True)
    info, found = machine_info(device), []
    for kind in kinds:
        try:
            if kind not in PROBES:
                raise ValueError(f"unknown kind {kind!r}; known: {', '.join(PROBES)}")
            found.append(measure(torch, PROBES[kind], device, device != "cuda", seconds, warm_s))
        except Exception as exc:  # noqa: BLE001 - one failing probe is one error entry
            found.append({"kind": kind, "error": f"{type(exc).__name__}: {exc}"[:500]})
        log.info("power probe %s: %s", kind, {k: found[-1].get(k) for k in ("tflops", "power_w_mean", "error")})
        with open(os.path.join(out_dir, POWER_FILE), "w") as fh:
            json.dump({"device": info, "seconds": seconds, "probes": found}, fh, indent=1, default=str)
        if device == "cuda":
            torch.cuda.empty_cache()
    return found


__all__ = ["POWER_FILE", "PROBES", "DRY_RUN", "Probe", "build", "measure", "run_power_kernels"]
