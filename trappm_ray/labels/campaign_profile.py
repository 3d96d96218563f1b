"""Where a training step's GPU time goes, kernel by kernel: a profile to run on a GPU slot.

The campaign's rows time whole phases (forward, backward, optimizer); the step model predicts
each kernel. Where the two disagree by several times (EfficientNet-B0 on the H200: a bf16 step
at batch 384 measured 194 ms, the step model's kernels 31 ms; ConvNeXt-T in NHWC 2x; TF32
transformers 1.4-2x, ``docs/results-campaign.md``) only the kernels say which op runs slow. This module runs
a few training steps of a model in one setting under ``torch.profiler`` (CUDA kernels on a GPU,
ops on the CPU for the dry run) and writes, per kernel name, its calls and total device time,
and per ATen op its device time, so that the next session can set each op class against the
step model's figure for it.

On the GPU machine, after the shard (a minute for the default list)::

    PYTHONPATH=. python3 jobs/gpu_campaign.py --profile default --out $OUT/profile
"""
from __future__ import annotations

import json
import logging
import os
import time

from trappm_ray.labels.campaign_instruments import WallEvent, machine_info
from trappm_ray.labels.campaign_plan import TRAIN_WARMUP, Job, Setting
from trappm_ray.labels.campaign_run import Workload, train_stepper

log = logging.getLogger(__name__)

PROFILE_FILE = "profile.json"
PROFILED_STEPS = 3
TOP = 80  # kernels and ops kept per profile, the longest first
# The step model's largest misses on the H200 rows, and a model it reads well beside each
DEFAULT = ("efficientnet_b0@224:amp-bf16:nchw:256", "efficientnet_b0@224:amp-bf16:nhwc:256",
           "efficientnet_b0@224:amp-fp16:nchw:256", "resnet50@224:amp-bf16:nchw:256",
           "convnext_tiny@224:amp-bf16:nhwc:128", "vit_base_patch16_224@224:tf32:nchw:128",
           "vit_base_patch16_224@224:amp-bf16:nchw:128")
DRY_RUN = ("test_efficientnet@32:fp32:nchw:2", "test_vit@32:amp-bf16:nchw:2")


def parse(spec: str) -> tuple[Job, Setting, int]:
    """``model@size:precision:memory_format:batch`` (a timm model) as a job, its setting and batch."""
    try:
        model_size, precision, memory_format, batch = spec.split(":")
        model, size = model_size.split("@")
        setting = Setting(precision, "adamw", memory_format)
        return Job(model, "timm", int(size), (setting,)), setting, int(batch)
    except ValueError:
        raise ValueError(f"a profile is model@size:precision:memory_format:batch, got {spec!r}") from None


def _device_us(event, cuda: bool) -> float:
    """An averaged profiler event's own device time (us; CPU time on the CPU), whatever the torch
    version names it."""
    if not cuda:
        return float(event.self_cpu_time_total)
    for name in ("self_device_time_total", "self_cuda_time_total"):
        if hasattr(event, name):
            return float(getattr(event, name))
    return 0.0


def kernel_profile(w: Workload, setting: Setting, n: int, cuda: bool, steps: int = PROFILED_STEPS) -> dict:
    """``steps`` training steps of ``w`` at batch ``n`` after warm-up, profiled: wall time per
    step, and the longest kernels (a GPU) or ops (the CPU) with their calls and total time."""
    torch = w.torch
    w.configure(setting)
    train_step, _, _ = train_stepper(w, setting, n, WallEvent)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(TRAIN_WARMUP):
        train_step(None)
    sync()
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    start = time.perf_counter()
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(steps):
            train_step(None)
        sync()
    wall_ms = (time.perf_counter() - start) * 1e3 / steps
    events = [(e.key, int(e.count), _device_us(e, cuda)) for e in prof.key_averages()]
    # on a GPU the kernels are the events no ATen op names; on the CPU the ops are all there is
    kernels = [e for e in events if not e[0].startswith("aten::")] if cuda else events
    ops = [e for e in events if e[0].startswith("aten::")]

    def top(rows: list[tuple[str, int, float]]) -> list[dict]:
        rows = sorted((r for r in rows if r[2] > 0), key=lambda r: -r[2])[:TOP]
        return [{"name": k, "calls": c, "total_us_per_step": us / steps} for k, c, us in rows]
    return {"model": w.job.model, "size": w.job.size, "setting": setting.name, "batch": n, "steps": steps,
            "step_ms_wall": wall_ms, "kernels": top(kernels), "ops": top(ops)}


def run_profiles(specs: list[str], out_dir: str, device: str = "cuda") -> list[dict]:
    """Each ``model@size:precision:memory_format:batch`` of ``specs`` profiled in this process
    (a spec that fails becomes an entry with its error), written to ``<out_dir>/profile.json``
    after each one (a run killed at its limit keeps what it finished)."""
    import torch  # the GPU machine's; this module is not imported by the product

    os.makedirs(out_dir, exist_ok=True)
    torch.backends.cudnn.benchmark = False  # as the campaign's rows ran
    info, found = machine_info(device), []
    for spec in specs:
        try:
            job, setting, n = parse(spec)
            found.append(kernel_profile(Workload(job, device, torch), setting, n, device == "cuda"))
        except Exception as exc:  # noqa: BLE001 - one failing profile is one error entry
            found.append({"spec": spec, "error": f"{type(exc).__name__}: {exc}"[:500]})
        log.info("profiled %s", spec)
        with open(os.path.join(out_dir, PROFILE_FILE), "w") as fh:
            json.dump({"device": info, "profiles": found}, fh, indent=1, default=str)
        if device == "cuda":
            torch.cuda.empty_cache()
    return found


__all__ = ["PROFILE_FILE", "PROFILED_STEPS", "DEFAULT", "DRY_RUN", "parse", "kernel_profile", "run_profiles"]
