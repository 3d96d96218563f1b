"""The typed result of a prediction and the options that change it: what travels from the API to
the CLI, the HTTP app and the batch job."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from trappm_ray import errors
from trappm_ray.targets import REPORTED


@dataclass(frozen=True)
class Estimate:
    """A seed-ensemble mean with its spread and interval, in ``unit``."""

    value: float
    low: float
    high: float
    std: float
    unit: str


@dataclass(frozen=True)
class Cost:
    """``steps`` training steps: wall-clock hours, their cost at a price per GPU-hour (paper section
    VI-D), their energy (kWh) over every GPU and its cost at a price per kWh."""

    steps: int
    price_per_hour: float | None
    hours: float
    cost: float | None
    energy_kwh: float | None = None
    price_per_kwh: float | None = None
    energy_cost: float | None = None


@dataclass(frozen=True)
class PredictOptions:
    """Everything besides the model that changes a prediction (also the cache key of the server).

    Args:
        batch_size: bound to every data input's first dimension (a fixed-batch file is re-bound
            where that is sound, :mod:`trappm_ray.graph.rebind`); None = as exported.
        resolution: bound to symbolic spatial dims (and the export size of timm names/modules).
        dims: values of other named symbolic dims, e.g. ``{"seq": 128}``.
        memory_budget_mb: when set, also search the largest batch whose memory fits it.
        steps, price_per_hour: when both set, the cost of that many training steps.
        interval_z: half-width of the interval in ensemble standard deviations.
        max_batch: upper end of the largest-batch search.
        precision, optimizer, gpus, memory_format: the training setting predicted for
            (:mod:`trappm_ray.model.options`); None = the predictor's default, the setting its
            labels were measured in (the CPU predictor: fp32, Adam, 1).
        recompute: activation checkpointing of every residual block (GPUs; None = off).
        grad_accum: forward/backward passes of ``batch_size`` each per optimizer step (GPUs;
            None = 1); a step then trains ``batch_size x grad_accum`` samples.
        device: answer with this device's predictor (:func:`load_predictor`) instead of the one
            :func:`predict_many` is given (the HTTP app's ``?device=``); None = that one.
        power_limit_w: the GPU's power limit (W); None = its TDP, the default limit. A lower
            limit lowers the clock and lengthens the step where the power model says it binds.
        price_per_kwh: with ``steps``, the energy cost beside the GPU-hour cost.
        layers: when positive, a per-layer breakdown of that many layers, the costliest first.
        cluster: with ``gpus`` above 1 on a GPU, the cluster data parallelism runs on (a name of
            ``data/clusters.csv``, a JSON file or JSON text; None: the table's first of that GPU).
        global_batch: samples per optimizer step over every GPU; gradient accumulation makes it up
            (``grad_accum`` becomes ``global_batch / (batch_size x gpus)``, which must divide).
        zero: the ZeRO stage of the data parallelism over ``gpus`` (0: DDP; 1-2: optimizer state
            and gradients sharded; 3: FSDP's full sharding, the weights too).
    """

    batch_size: int | None = 1
    resolution: int | None = None
    dims: tuple[tuple[str, int], ...] = ()
    memory_budget_mb: float | None = None
    steps: int | None = None
    price_per_hour: float | None = None
    interval_z: float = 1.96
    max_batch: int = 4096
    precision: str | None = None
    optimizer: str | None = None
    gpus: int | None = None
    memory_format: str | None = None
    recompute: bool | None = None
    grad_accum: int | None = None
    device: str | None = None
    power_limit_w: float | None = None
    price_per_kwh: float | None = None
    layers: int = 0
    cluster: str | None = None
    global_batch: int | None = None
    zero: int = 0

    def __post_init__(self) -> None:
        if self.batch_size is not None and not 1 <= self.batch_size <= self.max_batch:
            raise errors.BadOption(f"batch_size must be in 1..{self.max_batch}, got {self.batch_size}")
        for name in ("resolution", "memory_budget_mb", "steps", "price_per_hour", "power_limit_w", "price_per_kwh"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise errors.BadOption(f"{name} must be a positive number, got {value}")
        if self.gpus is not None and not 1 <= self.gpus <= 65536:
            raise errors.BadOption(f"gpus must be in 1..65536, got {self.gpus}")
        for name, value in self.dims:
            if not 1 <= value <= 1 << 20:
                raise errors.BadOption(f"dim {name} must be in 1..{1 << 20}, got {value}")
        if self.global_batch is not None:
            per_pass = (self.batch_size or 1) * (self.gpus or 1)
            if self.global_batch < 1 or self.global_batch % per_pass:
                raise errors.BadOption(f"global_batch {self.global_batch} is no multiple of batch_size x gpus = {per_pass}")
            if self.grad_accum not in (None, self.global_batch // per_pass):
                raise errors.BadOption(f"global_batch {self.global_batch} and grad_accum {self.grad_accum} disagree: "
                                       "give one of them")
            object.__setattr__(self, "grad_accum", self.global_batch // per_pass)  # frozen: set once, here
        if self.grad_accum is not None and not 1 <= self.grad_accum <= 4096:
            raise errors.BadOption(f"grad_accum must be in 1..4096, got {self.grad_accum}")
        if self.zero not in (0, 1, 2, 3):
            raise errors.BadOption(f"zero must be 0, 1, 2 or 3, got {self.zero}")
        if self.zero and (self.gpus or 1) < 2:
            raise errors.BadOption(f"ZeRO {self.zero} shards over data-parallel GPUs: give gpus above 1")
        if not 0 <= self.interval_z <= 10:
            raise errors.BadOption(f"interval_z must be in 0..10, got {self.interval_z}")

    def key(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass
class Prediction:
    """Predicted costs of one model at one batch size, with derived quantities."""

    model: str
    model_sha256: str
    batch_size: int
    train_step_ms: Estimate | None
    train_memory_mb: Estimate | None
    inference_ms: Estimate | None
    train_power_w: Estimate | None
    model_version: str
    device: dict
    graph: dict
    interval_z: float
    gpu_profiles: dict[str, str | None] = field(default_factory=dict)
    smallest_profile: str | None = None
    runner_up_profile: str | None = None  # the next smallest option on another GPU model
    memory_budget_mb: float | None = None
    max_batch_size: int | None = None
    training_cost: Cost | None = None
    options: dict = field(default_factory=dict)
    domain: dict = field(default_factory=dict)
    floors: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    memory_terms: dict | None = None
    notes: list[str] = field(default_factory=list)
    interval: str = "mean +- interval_z sd over seeds"  # what the time intervals are
    power: dict | None = None  # limit, clock, inference power, energy per step (GPU devices)
    layers: list[dict] | None = None  # per layer: params, MACs, activation MB, share of the time
    distributed: dict | None = None  # data parallelism: GPUs, nodes, cluster, all-reduce, global batch

    @property
    def throughput_samples_s(self) -> float | None:
        """Training samples per second: the batch (over every GPU of a data-parallel job, times
        the passes of gradient accumulation) over one step."""
        s = self.train_step_ms
        samples = ((self.distributed or {}).get("global_batch")
                   or self.batch_size * int((self.options or {}).get("grad_accum", 1)))
        return samples * 1e3 / s.value if s and s.value > 0 else None

    @property
    def inference_samples_s(self) -> float | None:
        s = self.inference_ms
        return self.batch_size * 1e3 / s.value if s and s.value > 0 else None

    def summary(self) -> str:
        """One line a person reads first: step time, throughput, memory with its upper end, and
        whether that fits the device (its ``memory_gb`` where the device dict carries it)."""
        parts = []
        name = self.device.get("name") or self.device.get("slug") or "the device"
        if self.distributed:
            how = "data parallel" if self.distributed["parallel"] == "dp" else self.distributed["parallel"]
            name = f"{self.distributed['gpus']} x {name} ({how}, {self.distributed['cluster']})"
        if self.train_step_ms is not None:
            accum = int((self.options or {}).get("grad_accum") or 1)
            batch = (f"batch {self.distributed['global_batch']} ({self.batch_size} per GPU and pass)" if self.distributed
                     else f"batch {self.batch_size * accum} ({self.batch_size} per pass)" if accum > 1
                     else f"batch {self.batch_size}")
            parts.append(f"~{self.train_step_ms.value:.3g} ms per training step at {batch} "
                         f"({self.throughput_samples_s or 0:,.0f} samples/s) on {name}")
        elif self.inference_ms is not None:
            parts.append(f"~{self.inference_ms.value:.3g} ms per inference at batch {self.batch_size} on {name}")
        m = self.train_memory_mb
        if m is not None:
            text = f"{m.value / 1024:.3g} GB of training memory (up to {m.high / 1024:.3g} GB)"
            memory_gb = self.device.get("memory_gb")
            if memory_gb and self.device.get("kind") in ("cuda", "rocm"):
                text += (f", fits its {memory_gb:g} GB" if m.high / 1024 <= memory_gb else
                         f", more than its {memory_gb:g} GB" if m.value / 1024 > memory_gb else
                         f", within its {memory_gb:g} GB only below the interval's upper end")
            if self.smallest_profile:
                text += f"; smallest GPU or MIG slice that holds it: {self.smallest_profile}"
            parts.append(text)
        if self.train_power_w is not None:
            gpus = (self.distributed or {}).get("gpus", 1)
            parts.append(f"~{self.train_power_w.value:.0f} W" if gpus == 1 else
                         f"~{self.train_power_w.value:.0f} W per GPU, {gpus * self.train_power_w.value:,.0f} W over {gpus}")
        return "; ".join(parts)

    def cost(self, steps: int, price_per_hour: float | None, price_per_kwh: float | None = None) -> Cost:
        """``steps`` training steps: wall-clock hours, their cost at ``price_per_hour`` per GPU-hour
        (any currency; every GPU of a data-parallel job counts), and where the power is known
        their energy over all GPUs and its cost at ``price_per_kwh``."""
        if self.train_step_ms is None:
            raise ValueError("the predictor has no train_step_ms target")
        hours = steps * self.train_step_ms.value / 3.6e6
        gpus = (self.distributed or {}).get("gpus", 1)
        kwh = gpus * hours * self.train_power_w.value / 1e3 if self.train_power_w else None
        return Cost(steps, price_per_hour, hours, gpus * hours * price_per_hour if price_per_hour else None, kwh,
                    price_per_kwh, kwh * price_per_kwh if kwh is not None and price_per_kwh else None)

    def to_dict(self) -> dict:
        """Plain JSON types: each target's value at top level, intervals under ``interval``."""
        out = {"summary": self.summary(), "model": self.model, "model_sha256": self.model_sha256,
               "batch_size": self.batch_size}
        present = {t: e for t in REPORTED if (e := getattr(self, t)) is not None}
        out.update({t: (present[t].value if t in present else None) for t in REPORTED})
        out["interval"] = {t: [e.low, e.high] for t, e in present.items()}
        out["std"] = {t: e.std for t, e in present.items()}
        out["units"] = {t: e.unit for t, e in present.items()}
        out.update(interval_z=self.interval_z, interval_method=self.interval, throughput_samples_s=self.throughput_samples_s,
                   inference_samples_s=self.inference_samples_s, gpu_profiles=self.gpu_profiles,
                   smallest_profile=self.smallest_profile, runner_up_profile=self.runner_up_profile,
                   memory_budget_mb=self.memory_budget_mb,
                   max_batch_size=self.max_batch_size,
                   training_cost=asdict(self.training_cost) if self.training_cost else None,
                   model_version=self.model_version, device=self.device, graph=self.graph,
                   options=self.options, domain=self.domain, floors=self.floors,
                   warnings=self.warnings, notes=self.notes, memory_terms=self.memory_terms, power=self.power,
                   layers=self.layers, distributed=self.distributed)
        return out


# -- prediction ---------------------------------------------------------------------------------


__all__ = ["Estimate", "Cost", "PredictOptions", "Prediction"]
