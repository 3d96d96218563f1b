"""Run the GPU campaign's jobs on this machine and write each row the moment it is measured.

Runs where the GPU slot runs: it needs torch, timm, transformers and (for power and device
memory) nvidia-ml-py, never Ray or the rest of the project. One process per job (a model at one
input size): children fork from a forkserver that imported torch, timm and transformers once,
so a job pays its CUDA context and model creation, not the imports. Each row is appended to
``rows.jsonl`` and flushed before the next one starts, so a run killed at its limit keeps every
finished row.

One row = one (model, input size, setting, batch size): the training step (zero_grad, forward and
loss, backward, optimizer step; ``grad_accum`` micro-batches per step) timed with CUDA events over
:data:`~trappm_ray.labels.campaign_plan.TIMED_STEPS` steps after warm-up, split into forward,
backward and optimizer; then inference (eval, no_grad, the same autocast) at the same batch.
Memory is reset between rows: the optimizer and gradients of a row are freed, the allocator's cache
emptied and its peaks reset; what is still allocated when the next row starts, less the model's
own weights and buffers, is stored as ``leftover_mb`` (0 when nothing carried over: the check).
The first warm-up step's wall time is kept apart (``first_step_ms``): what a new batch size costs
before its steps settle, where a slot's time goes besides the timed steps.
"""
from __future__ import annotations

import contextlib
import gc
import json
import logging
import multiprocessing
import os
import signal
import statistics
import time
from dataclasses import asdict

from trappm_ray.corpus import text_models, zoo
from trappm_ray.labels.campaign_instruments import (MEASURED, ROWS_FILE, WallEvent, count_rows, emit,
                                                    machine_info, sampled, spread)
from trappm_ray.labels.campaign_plan import (CAMPAIGN, DRY_RUN_TEXT, INFER_WARMUP, TIMED_STEPS, TRAIN_WARMUP,
                                             Job, Setting, Shard, batch_ladder, item_id)

log = logging.getLogger(__name__)

_PRELOAD = ["torch", "timm", "transformers", "trappm_ray.labels.campaign_run"]
METHOD = (f"trappm-ray GPU campaign {CAMPAIGN}: random inputs and targets; train step = zero_grad + "
          f"forward + loss + backward (x grad_accum) + optimizer step; {TRAIN_WARMUP} warm-up + "
          f"{TIMED_STEPS} timed steps queued back to back, each timed by CUDA events; inference = eval, "
          f"no_grad, same autocast, {INFER_WARMUP} warm-up + {TIMED_STEPS} timed; NVML power, memory "
          f"and SM clock sampled every 20 ms during the timed steps; one process per model, memory "
          f"freed and peaks reset between rows; cuDNN autotuning off (its heuristics pick the kernels); "
          f"TF32 as the row's allow_tf32 says (fp32: PyTorch's default, TF32 convolutions only)")


class Workload:
    """A job's model and how to feed it: built once per job, reused by every row."""

    def __init__(self, job: Job, device: str, torch) -> None:
        self.job, self.torch, self.dev = job, torch, torch.device(device)
        torch.manual_seed(0)
        if job.source == "timm":
            with torch.device(self.dev):  # weights created where they train, whatever timm's version
                self.model = zoo.create_model(job.model, job.size)
            self.classes = getattr(self.model, "num_classes", 0) or 1000
        else:
            with torch.device(self.dev):
                self.model = text_models.build_model(job.model, meta=False, attn_implementation=None,
                                                     config=DRY_RUN_TEXT.get(job.model))
            self.classes = int(self.model.config.vocab_size)
        self.model.train()
        tensors = list(self.model.parameters()) + list(self.model.buffers())
        self.params = sum(p.numel() for p in self.model.parameters())
        self.own_bytes = sum(t.numel() * t.element_size() for t in tensors)

    def configure(self, setting: Setting) -> None:
        torch = self.torch
        # fp32 is PyTorch's default math (TF32 convolutions, FP32 matrix products): what a user
        # who asks for fp32 runs; gpu-v1's shards 0-8 ran it strict (both off; their rows say so)
        torch.backends.cuda.matmul.allow_tf32 = setting.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = True
        if setting.memory_format != "none":
            fmt = torch.channels_last if setting.memory_format == "nhwc" else torch.contiguous_format
            self.model.to(memory_format=fmt)
        full = setting.recompute == "full"
        if self.job.source == "timm":
            self.model.set_grad_checkpointing(full)
        elif full:
            self.model.gradient_checkpointing_enable()
        elif self.model.is_gradient_checkpointing:
            self.model.gradient_checkpointing_disable()

    def batch(self, n: int, setting: Setting):
        torch = self.torch
        if self.job.source == "timm":
            x = torch.randn(n, 3, self.job.size, self.job.size, device=self.dev)
            if setting.memory_format == "nhwc":
                x = x.contiguous(memory_format=torch.channels_last)
            return x, torch.randint(0, self.classes, (n,), device=self.dev)
        ids = torch.randint(0, self.classes, (n, self.job.size), device=self.dev)
        return ids, ids

    def loss(self, x, y):
        F = self.torch.nn.functional
        if self.job.source == "timm":
            out = self.model(x)
            out = out[0] if isinstance(out, (tuple, list)) else out
            return F.cross_entropy(out, y)
        out = self.model(input_ids=x)
        logits = out[0] if isinstance(out, (tuple, list)) else out.logits if hasattr(out, "logits") \
            else out.last_hidden_state
        if logits.shape[-1] == self.classes:  # a language-model head: next-token / masked-token loss
            return F.cross_entropy(logits.float().flatten(0, -2), y.flatten())
        return logits.float().pow(2).mean()  # an encoder without a head (T5 encoder)

    def infer(self, x):
        return self.model(x) if self.job.source == "timm" else self.model(input_ids=x)


def allow_tf32(torch) -> str:
    """The TF32 flags in force, as the label column ``allow_tf32`` records them."""
    matmul, conv = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    names = {(False, False): "none", (False, True): "conv", (True, False): "matmul", (True, True): "all"}
    return names[(bool(matmul), bool(conv))]


def _optimizer(setting: Setting, params, torch):
    if setting.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=1e-4)
    return torch.optim.SGD(params, lr=0.01, momentum=0.9, nesterov=True)


def _reset(torch, cuda: bool) -> None:
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def train_stepper(w: Workload, setting: Setting, n: int, Event) -> tuple:
    """``(train_step, amp, micro)``: one training step of ``setting`` at batch ``n`` (its own
    optimizer, scaler and micro-batches; ``train_step(marks)`` records an ``Event()`` around each
    backward into ``marks`` unless None), the autocast context it runs in, its micro-batches."""
    torch = w.torch
    opt = _optimizer(setting, w.model.parameters(), torch)
    half = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(setting.precision)
    scaler = torch.amp.GradScaler(w.dev.type) if setting.precision == "amp-fp16" else None
    amp = (lambda: torch.autocast(w.dev.type, dtype=half)) if half else contextlib.nullcontext
    micro = [w.batch(n, setting) for _ in range(setting.grad_accum)]

    def train_step(marks: list | None) -> None:
        opt.zero_grad(set_to_none=True)
        for x, y in micro:
            with amp():
                loss = w.loss(x, y) / setting.grad_accum
            if marks is not None:
                marks.append(Event())
                marks[-1].record()
            (scaler.scale(loss) if scaler else loss).backward()
            if marks is not None:
                marks.append(Event())
                marks[-1].record()
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
    return train_step, amp, micro


def measure_row(w: Workload, setting: Setting, n: int, cuda: bool) -> dict:
    """Train and inference measurements of one batch size; raises what the step raises."""
    torch = w.torch
    _reset(torch, cuda)
    out: dict = {"leftover_mb": (torch.cuda.memory_allocated() - w.own_bytes) / 2**20 if cuda else None}
    Event = (lambda: torch.cuda.Event(enable_timing=True)) if cuda else WallEvent
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    train_step, amp, micro = train_stepper(w, setting, n, Event)
    # the first step at a new batch: kernel choice and loading for its shapes (the H200 rows of
    # ResNet-50 spent 3-8 s each outside their timed and warm-up steps, text models 0.3 s)
    sync()
    first = time.perf_counter()
    train_step(None)
    sync()
    out["first_step_ms"] = (time.perf_counter() - first) * 1e3
    for _ in range(TRAIN_WARMUP - 1):
        train_step(None)
    sync()
    steps, wall0 = [], time.perf_counter()
    with sampled(cuda) as power:
        for _ in range(TIMED_STEPS):
            start, end = Event(), Event()
            marks: list = []
            start.record()
            train_step(marks)
            end.record()
            steps.append((start, marks, end))
        sync()
    timed_s = time.perf_counter() - wall0
    total, fwd, bwd, optim = [], [], [], []
    for start, marks, end in steps:
        points = [start, *marks]
        total.append(start.elapsed_time(end))
        fwd.append(sum(points[i].elapsed_time(points[i + 1]) for i in range(0, len(points) - 1, 2)))
        bwd.append(sum(points[i].elapsed_time(points[i + 1]) for i in range(1, len(points) - 1, 2)))
        optim.append(marks[-1].elapsed_time(end))
    out.update(spread("train_step_ms", total), train_steps_timed=len(total),
               forward_ms=statistics.median(fwd), backward_ms=statistics.median(bwd),
               optimizer_ms=statistics.median(optim))
    out["train_samples_per_s"] = n * setting.grad_accum / (out["train_step_ms"] / 1e3)
    if cuda:
        if power["energy_j"] is not None:  # the counter ran over the timed steps: per step
            power["energy_j"] /= len(total)
        out.update(power, power_window_s=timed_s, cuda_max_allocated_mb=torch.cuda.max_memory_allocated() / 2**20,
                   cuda_max_reserved_mb=torch.cuda.max_memory_reserved() / 2**20)
    w.model.zero_grad(set_to_none=True)  # the optimizer and its state go when this returns
    w.model.eval()
    try:
        x = micro[0][0]
        with torch.no_grad(), amp():
            for _ in range(INFER_WARMUP):
                w.infer(x)
            sync()
            times = []
            with sampled(cuda) as power:
                for _ in range(TIMED_STEPS):
                    a, b = Event(), Event()
                    a.record()
                    w.infer(x)
                    b.record()
                    times.append((a, b))
                sync()
        ms = [a.elapsed_time(b) for a, b in times]
        out.update(spread("inference_ms", ms), inference_steps_timed=len(ms),
                   inference_samples_per_s=n / (statistics.median(ms) / 1e3),
                   inference_power_w_mean=power.get("power_w_mean"))
    finally:
        w.model.train()
    return out


def _row(job: Job, setting: Setting, n: int, info: dict, item: str, params: int | None) -> dict:
    """The identity and provenance columns of a row; measurements are added to it."""
    return {**dict.fromkeys(MEASURED), "campaign_item": item, "arch": job.model, "model_source": job.source,
            "resolution": job.size,
            "seq_len": job.size if job.source == "transformers" else None, "batch_size": n,
            "precision": setting.precision, "optimizer": setting.optimizer,
            "memory_format": setting.memory_format, "recompute": setting.recompute,
            "grad_accum": setting.grad_accum, "allow_tf32": None, "cudnn_benchmark": None, "gpus": 1,
            "parallelism": "single",
            "compiled": "none", "params": params, "warmup": TRAIN_WARMUP, "steps": TIMED_STEPS, "method": METHOD,
            "harness_version": CAMPAIGN, **info, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def sweep(w: Workload, setting: Setting, info: dict, item: str, path: str, deadline: float,
          measure=measure_row) -> list[dict]:
    """Batch sizes from 1 up to the first out-of-memory (a censored ``oom`` row), the job's
    ``max_batch`` or the sweep's time (a ``skipped_slow`` row for the size with no time left)."""
    torch, cuda = w.torch, w.dev.type == "cuda"
    rows, prev = [], None
    try:
        w.configure(setting)
    except Exception as exc:  # noqa: BLE001 - e.g. a model without activation checkpointing
        row = _row(w.job, setting, 1, info, item, w.params) | {
            "status": "error", "error": f"setting not applicable: {type(exc).__name__}: {exc}"[:500]}
        emit(path, row)
        return [row]
    for n in batch_ladder(w.job.max_batch):
        row = _row(w.job, setting, n, info, item, w.params) | {
            "allow_tf32": allow_tf32(torch), "cudnn_benchmark": "on" if torch.backends.cudnn.benchmark else "off"}
        projected = prev["wall_s"] * n / prev["batch_size"] if prev else 0.0
        if time.monotonic() + projected > deadline:
            row.update(status="skipped_slow", error=f"the sweep's time ({w.job.cap_s:g} s) left no room "
                       f"for batch {n} (projected {projected:.1f} s)")
            emit(path, row)
            rows.append(row)
            break
        t0 = time.monotonic()
        try:
            row.update(measure(w, setting, n, cuda), status="ok", error=None)
        except torch.OutOfMemoryError as exc:
            row.update(status="oom", error=str(exc).splitlines()[0][:500])
        except Exception as exc:  # noqa: BLE001 - one failing size becomes one error row
            row.update(status="error", error=f"{type(exc).__name__}: {exc}"[:500])
        if row["status"] != "ok":  # a failed step leaves tensors behind in its traceback's frames
            w.model.zero_grad(set_to_none=True)
            w.model.train()
            _reset(torch, cuda)
        row["wall_s"] = time.monotonic() - t0
        emit(path, row)
        rows.append(row)
        if row["status"] == "oom" or (row["status"] == "error" and "CUDA error" in row["error"]):
            break  # censored at this batch; a CUDA error leaves the context unusable
        if row["status"] == "ok":
            prev = row
    return rows


def run_job(job: Job, item: str, info: dict, path: str, deadline: float) -> None:
    """A job in this process: its model once, then one sweep per setting (each within its cap)."""
    import torch

    signal.alarm(int(max(deadline - time.monotonic(), 1)) + 60)  # dies should the parent vanish
    # Autotuning off: on the first H200 slot it spent 4-15 s on every new batch size of a
    # ResNet-50 (sweeps stopped at batch 6-12 inside their cap) and its trial workspaces, not
    # the step, set the reserved peak (4.7 GB at batch 1 in fp32, 1.6 GB in use during the steps).
    torch.backends.cudnn.benchmark = False
    try:
        w = Workload(job, info["device"], torch)
    except Exception as exc:  # noqa: BLE001 - the model does not build here: one row says why
        for setting in job.settings:
            emit(path, _row(job, setting, 1, info, item, None) | {
                "status": "error", "error": f"model not built: {type(exc).__name__}: {exc}"[:500]})
        return
    for setting in job.settings:
        sweep(w, setting, info, item, path, min(time.monotonic() + job.cap_s, deadline))


def run(todo: list[tuple[Shard, Job]], out_dir: str, budget_s: float, device: str = "cuda") -> dict:
    """Run ``todo`` in order, one child process per job, while the budget allows its whole cost.

    Returns:
        A summary (also written to ``<out_dir>/run.json``): jobs run, rows, rows per minute.
    """
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, ROWS_FILE)
    start, before = time.monotonic(), count_rows(path)  # an earlier run's rows in the same folder
    info = machine_info(device)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    done, skipped = [], []
    for shard, job in todo:
        left = budget_s - (time.monotonic() - start)
        if job.cost_s > left:
            skipped.append(item_id(shard, job))
            break  # the next slot starts here: plan order is kept
        deadline = time.monotonic() + job.cost_s
        proc = ctx.Process(target=run_job, args=(job, item_id(shard, job), info, path, deadline), daemon=True)
        proc.start()
        proc.join(job.cost_s + 30)
        if proc.is_alive():
            proc.kill()
            proc.join()
        if proc.exitcode:
            why = f"job process ended with code {proc.exitcode}"
            emit(path, _row(job, job.settings[0], 0, info, item_id(shard, job), None)
                 | {"status": "crashed", "error": why})
        done.append(item_id(shard, job))
        log.info("%s done (%.0f s of %.0f used)", item_id(shard, job), time.monotonic() - start, budget_s)
    rows = count_rows(path) - before
    wall = time.monotonic() - start
    summary = {"campaign": CAMPAIGN, "device": info, "jobs_done": done, "next_not_started": skipped,
               "rows": rows, "wall_s": wall, "rows_per_min": rows / (wall / 60) if wall else None,
               "budget_s": budget_s, "plan": [asdict(j) for _, j in todo[:len(done)]]}
    with open(os.path.join(out_dir, "run.json"), "w") as fh:
        json.dump(summary, fh, indent=1, default=str)
    return summary


__all__ = ["METHOD", "Workload", "train_stepper", "measure_row", "sweep", "run_job", "run"]
