"""Label measurement harness: training step time, memory, power and inference latency of timm models.

One measurement = one (arch, batch size, resolution, dtype, optimizer, device) in a *fresh process*,
so peak-memory numbers never include another model's leftovers. Children are forked from a
``multiprocessing`` forkserver with torch and timm preloaded: a spawned child would pay the ~6 s
import cost every time, and a plain ``fork`` of the caller would inherit whatever it holds (Ray
worker threads and locks, a CUDA context, a large heap). The forkserver is a small single-threaded
process, started once per calling process, that has run no torch op (no OpenMP pool, no CUDA
context). Scripts that call :func:`measure` need an ``if __name__ == "__main__":`` guard, because
forkserver children re-import the main module. Label definitions: ``docs/labels.md``.
"""
from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import resource
import signal
import statistics
import threading
import time
from dataclasses import dataclass, replace

from trappm_ray.labels.machine import device_info, device_slug, nvml_handle, read_text, utcnow, wait_for_load
from trappm_ray.labels.store import COLUMNS

HARNESS_VERSION = "2"  # 2: ref_step_ms
CPU_DEFAULTS = (2, 10)  # (warm-up, timed) steps: a CPU step takes 0.05-3 s; 5+50 is GPU-sized
CUDA_DEFAULTS = (5, 50)  # the paper's policy
MIN_TIMED_STEPS = 3
REF_STEPS = 10  # timed steps of the reference network (labels.ref_step_ms)
_PRELOAD = ["torch", "timm", "trappm_ray.corpus.zoo", "trappm_ray.labels.harness"]

@dataclass
class MeasureSpec:
    """What to measure, and how.

    Args:
        arch, batch_size, resolution: timm architecture and input shape (N, 3, R, R).
        dtype: "float32"; on CUDA also "bfloat16"/"float16" (torch.autocast mixed precision).
        optimizer: "adam" (the paper's) or "sgd" (momentum 0.9). device: "cpu" or "cuda".
        warmup, steps: untimed / timed steps; None = device default (CPU 2+10, CUDA 5+50).
        threads: CPU intra-op threads; the child is pinned to that many cores.
        max_timed_seconds: stop timing once timed steps took this long (>= MIN_TIMED_STEPS kept).
        memory_cap_mb: CPU: cap on address-space growth above the baseline (RLIMIT_AS; failing
            allocations -> "oom"); CUDA: per-process caching-allocator cap. None = no cap.
        timeout_s: wall-clock limit of the whole child process (-> "timeout").
    """

    arch: str
    batch_size: int
    resolution: int
    dtype: str = "float32"
    optimizer: str = "adam"
    device: str = "cpu"
    warmup: int | None = None
    steps: int | None = None
    threads: int = 1
    max_timed_seconds: float | None = 30.0
    memory_cap_mb: float | None = None
    timeout_s: float = 900.0

    def __post_init__(self) -> None:
        dtypes = ("float32", "bfloat16", "float16") if self.device == "cuda" else ("float32",)
        if self.device not in ("cpu", "cuda") or self.dtype not in dtypes:
            raise ValueError(f"unsupported device/dtype {self.device}/{self.dtype}")
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer must be adam or sgd, not {self.optimizer!r}")
        warm, steps = CUDA_DEFAULTS if self.device == "cuda" else CPU_DEFAULTS
        self.warmup = warm if self.warmup is None else self.warmup
        self.steps = max(MIN_TIMED_STEPS, steps if self.steps is None else self.steps)


def _status_mb(field: str) -> float:
    """A ``/proc/self/status`` memory field (VmRSS, VmHWM, VmSize) in MiB."""
    line = next(ln for ln in read_text("/proc/self/status").splitlines() if ln.startswith(field + ":"))
    return int(line.split()[1]) / 1024


def spread(prefix: str, times_ms: list[float]) -> dict:
    """Median, p10, p90, min and max of step times (linearly interpolated percentiles)."""
    xs = sorted(times_ms)

    def pct(q: float) -> float:
        lo, frac = int(q * (len(xs) - 1)), q * (len(xs) - 1) % 1
        return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * frac

    return {prefix: pct(0.5), f"{prefix}_p10": pct(0.1), f"{prefix}_p90": pct(0.9),
            f"{prefix}_min": xs[0], f"{prefix}_max": xs[-1]}


class _NvmlSampler(threading.Thread):
    """Samples board power and device memory used every ``interval`` s while steps run."""

    def __init__(self, props, interval: float = 0.02) -> None:
        import pynvml

        super().__init__(daemon=True)
        self.nvml, self.interval, self.power, self.used = pynvml, interval, [], 0
        pynvml.nvmlInit()
        self.handle, self.done = nvml_handle(pynvml, props), threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.power.append(self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0)  # mW -> W
            self.used = max(self.used, self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used)
            self.done.wait(self.interval)

    def stop(self) -> dict:
        self.done.set()
        self.join()
        return {"nvml_used_mb": self.used / 2**20, "power_w_max": max(self.power, default=None),
                "power_w_mean": sum(self.power) / len(self.power) if self.power else None}


class WallEvent:
    """perf_counter stand-in for ``torch.cuda.Event``, so CPU and GPU share one timing loop."""

    def record(self) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: WallEvent) -> float:
        return (end.t - self.t) * 1e3


def _time_steps(step, spec: MeasureSpec, torch, sampler=None) -> list[float]:
    """Warm-up, then timed steps; per-step ms. CUDA events are recorded without a per-step sync,
    so they time each step's GPU work with steps queued back to back, as in real training."""
    cuda = spec.device == "cuda"
    new_event = (lambda: torch.cuda.Event(enable_timing=True)) if cuda else WallEvent
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(spec.warmup):
        step()
    sync()
    if sampler is not None:
        sampler.start()
    events, start = [], time.perf_counter()
    for i in range(spec.steps):
        events.append((new_event(), new_event()))
        events[-1][0].record()
        step()
        events[-1][1].record()
        if (spec.max_timed_seconds is not None and i + 1 >= MIN_TIMED_STEPS
                and time.perf_counter() - start > spec.max_timed_seconds):  # host clock on CUDA
            break
    sync()
    return [a.elapsed_time(b) for a, b in events]


def _cpu_baseline(spec: MeasureSpec, torch) -> float:
    """Prime, read the baseline RSS, apply the memory cap, reset the peak-RSS counter.

    A forked child faults library pages in lazily; one tiny train step (conv, norm, autograd, Adam)
    makes them resident first, so they count in the baseline rather than as the model's memory.
    """
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.GELU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
    opt = torch.optim.Adam(net.parameters())
    torch.nn.functional.cross_entropy(net(torch.randn(2, 3, 8, 8)), torch.tensor([0, 1])).backward()
    opt.step()
    del net, opt
    gc.collect()
    if spec.memory_cap_mb:  # allocations beyond the cap fail cleanly instead of swapping the host
        limit = int((_status_mb("VmSize") + spec.memory_cap_mb) * 2**20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    with open("/proc/self/clear_refs", "w") as fh:  # "5": reset VmHWM (peak RSS) to current RSS
        fh.write("5")
    return _status_mb("VmRSS")


def _reference_step_ms(spec: MeasureSpec, torch) -> float:
    """Median train step (ms) of one fixed small CNN (batch 8, 3x64x64, Adam, float32), timed
    in the measuring process right after the model: how fast the machine ran at that moment
    (and, by 18-30 ms across models, what state the model left; experiments/label_reference.py).

    A VM of the same CPU model, or other work on a neighbouring core, shifts every timing by
    ~20% here (docs/labels.md): when two rows of one configuration have different references,
    they were taken at different speeds, whatever their device slug says.
    """
    nn = torch.nn
    torch.manual_seed(0)
    dev = torch.device(spec.device)
    net = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).to(dev)
    opt = torch.optim.Adam(net.parameters())
    x, y = torch.randn(8, 3, 64, 64, device=dev), torch.randint(0, 10, (8,), device=dev)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()

    ref = replace(spec, warmup=2, steps=REF_STEPS, max_timed_seconds=None)
    return statistics.median(_time_steps(step, ref, torch))


def _measure_in_child(spec: MeasureSpec) -> dict:
    """The measurement proper; runs inside the fresh child process."""
    import torch
    import torch.nn.functional as F

    from trappm_ray.corpus import zoo

    out: dict = {}
    cuda, dev = spec.device == "cuda", torch.device(spec.device)
    torch.set_num_threads(spec.threads)
    sampler = _NvmlSampler(torch.cuda.get_device_properties(0)) if cuda else None
    if cuda and spec.memory_cap_mb:
        total_mb = torch.cuda.get_device_properties(0).total_memory / 2**20
        torch.cuda.set_per_process_memory_fraction(min(1.0, spec.memory_cap_mb / total_mb))
    if not cuda:
        out["mem_baseline_mb"] = _cpu_baseline(spec, torch)
    model = zoo.create_model(spec.arch, spec.resolution).to(dev)
    out["params"] = sum(p.numel() for p in model.parameters())
    x = torch.randn(spec.batch_size, 3, spec.resolution, spec.resolution, device=dev)
    # headless timm models (num_classes=0, e.g. DINOv2 backbones) output pooled features
    classes = getattr(model, "num_classes", 0) or getattr(model, "head_hidden_size", None) \
        or getattr(model, "num_features", 0) or 1000
    y = torch.randint(0, classes, (spec.batch_size,), device=dev)
    opt = (torch.optim.Adam(model.parameters()) if spec.optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
    half = None if spec.dtype == "float32" else getattr(torch, spec.dtype)
    scaler = torch.amp.GradScaler("cuda") if spec.dtype == "float16" else None

    def amp():  # mixed precision with fp32 master weights, as half-precision training runs
        return torch.autocast(spec.device, dtype=half) if half else contextlib.nullcontext()

    def logits():
        out_ = model(x)
        return out_[0] if isinstance(out_, (tuple, list)) else out_

    def train_step() -> None:
        opt.zero_grad(set_to_none=True)
        with amp():
            loss = F.cross_entropy(logits(), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:  # float16: loss scaling as real fp16 training does (unscale + inf check per step)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

    times = _time_steps(train_step, spec, torch, sampler)
    out.update(spread("train_step_ms", times), train_steps_timed=len(times))
    if cuda:
        out.update(sampler.stop(), cuda_max_allocated_mb=torch.cuda.max_memory_allocated() / 2**20,
                   cuda_max_reserved_mb=torch.cuda.max_memory_reserved() / 2**20)
    else:
        out["mem_peak_rss_mb"] = _status_mb("VmHWM")
        out["mem_above_baseline_mb"] = out["mem_peak_rss_mb"] - out["mem_baseline_mb"]
    model.eval()
    with torch.no_grad(), amp():
        times = _time_steps(logits, spec, torch)
    out.update(spread("inference_ms", times), inference_steps_timed=len(times))
    try:  # last: it must not touch the memory peaks; a failure here must not lose the row
        out["ref_step_ms"] = _reference_step_ms(spec, torch)
    except Exception:  # noqa: BLE001 - e.g. out of memory beside what the model left behind
        out["ref_step_ms"] = None
    return out


def _child(spec: MeasureSpec, conn) -> None:
    """Child entry point: pin, measure, send a partial row (or the failure) back through ``conn``."""
    signal.alarm(int(spec.timeout_s) + 30)  # dies on its own should the parent vanish
    out: dict = {}
    try:
        cores = sorted(os.sched_getaffinity(0))
        if spec.device == "cpu" and spec.threads < len(cores):
            cores = cores[-spec.threads:]  # the highest cores: core 0 tends to take the interrupts
            os.sched_setaffinity(0, cores)
        out["cores"] = ",".join(map(str, cores))
        out.update(_measure_in_child(spec), status="ok")
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a row
        text = f"{type(exc).__name__}: {exc}"
        oom = (isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError"
               or "can't allocate memory" in text.lower() or "out of memory" in text.lower())
        if not oom and _near_cpu_cap():
            oom, text = True, f"{text} [address space at memory_cap_mb]"
        out.update(status="oom" if oom else "error", error=text[:1000])
    gc.collect()
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))  # lift the cap: sending allocates
    conn.send(out)
    conn.close()


def _near_cpu_cap(headroom_mb: float = 64.0) -> bool:
    """Whether the address space is within ``headroom_mb`` of the memory cap: allocation failures
    inside libraries (oneDNN says "could not create a primitive") then count as OOM too."""
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    try:
        return soft != resource.RLIM_INFINITY and soft / 2**20 - _status_mb("VmSize") < headroom_mb
    except MemoryError:
        return True


def base_row(spec: MeasureSpec, info: dict) -> dict:
    """A row with every column: the spec and provenance from ``info``; measurements None."""
    from trappm_ray.corpus import zoo

    row = dict.fromkeys(COLUMNS)
    row.update({k: info.get(k) for k in ("device_name", "driver", "cuda", "torch_version",
                                          "timm_version", "machine_id", "boot_id", "logical_cpus")})
    row.update(device_slug=device_slug(info, spec.threads), arch=spec.arch,
               family=zoo.family_of(spec.arch), resolution=spec.resolution,
               batch_size=spec.batch_size, dtype=spec.dtype, optimizer=spec.optimizer,
               device=spec.device, threads=spec.threads, memory_cap_mb=spec.memory_cap_mb,
               exporter=zoo.EXPORTER, warmup=spec.warmup, steps=spec.steps, date=utcnow(),
               harness_version=HARNESS_VERSION)
    return row


def measure(spec: MeasureSpec, info: dict | None = None) -> dict:
    """Measure one configuration in a fresh forkserver child; never raises for model failures.

    Args:
        spec: what to measure.
        info: ``device_info(spec.device)``, reused across a sweep (computed when None).
    Returns:
        One flat row (see ``COLUMNS``); ``status`` is ok, oom, error, crashed or timeout.
    """
    row = base_row(spec, info or device_info(spec.device))
    row["load_avg_before"] = os.getloadavg()[0]
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)  # only takes effect when this process's server starts
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(spec, send), daemon=True)
    start = time.perf_counter()
    proc.start()
    send.close()  # so that recv sees EOF if the child dies without answering
    result, answered = None, recv.poll(spec.timeout_s)  # poll is also True at EOF (child died)
    with contextlib.suppress(EOFError):
        result = recv.recv() if answered else {
            "status": "timeout", "error": f"no result within {spec.timeout_s:g} s"}
    if answered:
        proc.join(None if result is None else 30)
    if proc.is_alive():  # timed out, or hung after answering
        proc.kill()
        proc.join()
    code = proc.exitcode
    if result is None and code == -signal.SIGKILL:
        result = {"status": "oom", "error": "child killed by SIGKILL (likely the kernel OOM killer)"}
    elif result is None:
        why = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        result = {"status": "crashed", "error": f"child {why} without a result"}
    recv.close()
    row.update(result, wall_s=time.perf_counter() - start, load_avg_after=os.getloadavg()[0])
    return row


def sweep(arch: str, resolution: int, batch_sizes, *, max_step_s: float | None = None,
          info: dict | None = None, on_row=None, max_load: float | None = None,
          max_load_wait_s: float = 1800.0, **spec_kwargs) -> list[dict]:
    """Measure ``batch_sizes`` in increasing order, stopping at the first OOM (as the paper did),
    timeout or crash. An "error" (e.g. BatchNorm rejecting batch 1) moves on to the next size.

    Args:
        arch, resolution: the model and input size.
        batch_sizes: iterable of batch sizes (sorted and de-duplicated here).
        max_step_s: a batch size whose train step, projected linearly from the last measured
            one, exceeds this many seconds is not measured; it and all larger sizes get rows
            with status "skipped_slow".
        info: ``device_info`` to reuse. on_row: optional callback called with each row.
        max_load: before each measurement, wait (at most ``max_load_wait_s``) until the machine
            is quiet by :func:`wait_for_load`; None = never wait.
        **spec_kwargs: further ``MeasureSpec`` fields (dtype, optimizer, device, warmup, ...).
    Returns:
        The rows, one per batch size measured, failed or skipped.
    """
    info = info or device_info(spec_kwargs.get("device", "cpu"))
    rows, prev = [], None
    for b in sorted(set(batch_sizes)):
        spec = MeasureSpec(arch, b, resolution, **spec_kwargs)
        projected_s = prev["train_step_ms"] * b / prev["batch_size"] / 1e3 if prev else 0.0
        if max_step_s is not None and projected_s > max_step_s:
            row = base_row(spec, info)
            row.update(status="skipped_slow", error=f"projected step {projected_s:.1f} s > {max_step_s} s")
        else:
            if max_load is not None:
                wait_for_load(max_load, max_load_wait_s)
            row = measure(spec, info)
        rows.append(row)
        if on_row:
            on_row(row)
        if row["status"] == "ok":
            prev = row
        elif row["status"] not in ("error", "skipped_slow"):
            break
    return rows


__all__ = ["MeasureSpec", "HARNESS_VERSION", "CPU_DEFAULTS", "spread", "WallEvent",
           "CUDA_DEFAULTS", "base_row", "measure", "sweep"]
