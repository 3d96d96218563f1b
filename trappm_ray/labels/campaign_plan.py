"""The GPU measurement campaign's plan: which models, input sizes and settings, in which shards.

The plan is fixed and versioned (:data:`CAMPAIGN`): the same code gives the same shards on any
machine, and a committed snapshot (``data/campaign/plan-<version>.json``) pins them, so a slot
months later continues the same plan. Changing what is measured means a new version.

A :class:`Job` is one model at one input size, measured in one process: for each of its
settings, a batch sweep from 1 up to the first out-of-memory (or its ``max_batch``). Each sweep has
a time cap (``cap_s``), so a job's cost is bounded by construction and shards of about seven
minutes of H100 time are sums of caps, not guesses. Sweeps on small models end long before their
cap, so a slot usually gets through more than one shard.

Vision models are timm architectures whose names appear in the public timm labels
(``data/labels/rtx3090-amp``): families kept aside for evaluation are never measured here.
Text models are built by ``transformers`` from the configs of :mod:`trappm_ray.corpus.text_models`.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import pyarrow.compute as pc

from trappm_ray import storage
from trappm_ray.labels import store

CAMPAIGN = "gpu-v1"
SHARD_BUDGET_S = 420.0  # about 7 minutes of measurement per shard
JOB_OVERHEAD_S = 6.0  # a child process, its CUDA context and the model's creation
TRAIN_WARMUP, INFER_WARMUP, TIMED_STEPS = 5, 3, 20


@dataclass(frozen=True)
class Setting:
    """How a model is trained in one sweep.

    Args:
        precision: ``amp-bf16`` / ``amp-fp16`` (autocast, fp32 master weights; fp16 with a
            GradScaler), ``tf32`` (fp32 tensors, TF32 matmul and convolutions) or ``fp32``.
        optimizer: ``adamw`` (torch.optim.AdamW, its default foreach path) or ``sgd-momentum``
            (SGD, momentum 0.9, Nesterov: timm's benchmark setting).
        memory_format: ``nchw`` or ``nhwc`` (channels-last) for images, ``none`` for text.
        recompute: ``none`` or ``full`` (activation checkpointing of every block).
        grad_accum: micro-batches per optimizer step; the row's batch is the micro-batch.
    """

    precision: str
    optimizer: str
    memory_format: str = "nchw"
    recompute: str = "none"
    grad_accum: int = 1

    @property
    def name(self) -> str:
        parts = [self.precision, self.optimizer, self.memory_format]
        parts += [f"recompute-{self.recompute}"] if self.recompute != "none" else []
        parts += [f"accum{self.grad_accum}"] if self.grad_accum != 1 else []
        return "/".join(parts)


@dataclass(frozen=True)
class Job:
    """One model at one input size, measured in one process, one batch sweep per setting.

    Args:
        model: a timm name, or a text-model config name (``text_models.config_names``).
        source: ``timm`` or ``transformers``.
        size: image resolution (px) or sequence length (tokens).
        settings: the sweeps, in order.
        max_batch: the sweep's last batch size when nothing runs out of memory before.
        cap_s: seconds one sweep may take; the sizes it has no time for get a censored row.
    """

    model: str
    source: str
    size: int
    settings: tuple[Setting, ...]
    max_batch: int = 2048
    cap_s: float = 40.0

    @property
    def id(self) -> str:
        return f"{self.model}@{self.size}"

    @property
    def cost_s(self) -> float:
        return JOB_OVERHEAD_S + self.cap_s * len(self.settings)


@dataclass(frozen=True)
class Shard:
    index: int
    jobs: tuple[Job, ...] = field(default_factory=tuple)

    @property
    def id(self) -> str:
        return f"{CAMPAIGN}/s{self.index:03d}"

    @property
    def cost_s(self) -> float:
        return sum(j.cost_s for j in self.jobs)


def item_id(shard: Shard, job: Job) -> str:
    """The ``campaign_item`` of a job's rows: ``gpu-v1/s003/resnet50@224``."""
    return f"{shard.id}/{job.id}"


def batch_ladder(max_batch: int) -> list[int]:
    """1, 2, 3, 4, 6, 8, 12, 16, ...: powers of two and the points halfway between, up to
    ``max_batch``."""
    out, p = [1], 1
    while p * 3 // 2 <= max_batch:
        out += [b for b in (p * 3 // 2, p * 2) if out[-1] < b <= max_batch]
        p *= 2
    return out


# Settings, named once. TIMM_AMP joins the RTX 3090 / 4090 public labels (timm's benchmark).
BF16 = Setting("amp-bf16", "adamw")
TIMM_AMP = Setting("amp-fp16", "sgd-momentum")
TF32 = Setting("tf32", "adamw")
FP32 = Setting("fp32", "adamw")
BF16_NHWC = Setting("amp-bf16", "adamw", "nhwc")
TIMM_AMP_NHWC = Setting("amp-fp16", "sgd-momentum", "nhwc")
BF16_RECOMPUTE = Setting("amp-bf16", "adamw", recompute="full")
BF16_ACCUM4 = Setting("amp-bf16", "adamw", grad_accum=4)
TEXT_BF16 = Setting("amp-bf16", "adamw", "none")
TEXT_FP16_SGD = Setting("amp-fp16", "sgd-momentum", "none")
TEXT_TF32 = Setting("tf32", "adamw", "none")
TEXT_FP32 = Setting("fp32", "adamw", "none")
TEXT_RECOMPUTE = Setting("amp-bf16", "adamw", "none", recompute="full")
TEXT_ACCUM4 = Setting("amp-bf16", "adamw", "none", grad_accum=4)

CONV_CORE = (TIMM_AMP, BF16)  # every convnet at every resolution
VIT_CORE = (BF16, TIMM_AMP)


def _vision(model: str, sizes: tuple[int, ...], first: tuple[Setting, ...], more: tuple[Setting, ...] = (),
            cap_s: float = 40.0) -> list[Job]:
    """Jobs of one timm model: ``first`` + ``more`` settings at its first size, ``first`` at others."""
    return [Job(model, "timm", s, first + (more if i == 0 else ()), cap_s=cap_s)
            for i, s in enumerate(sizes)]


def _text(model: str, seqs: tuple[int, ...], first: tuple[Setting, ...], more: tuple[Setting, ...] = (),
          max_batch: int = 512, cap_s: float = 45.0) -> list[Job]:
    return [Job(model, "transformers", s, first + (more if i == 0 else ()), max_batch=max_batch, cap_s=cap_s)
            for i, s in enumerate(seqs)]


ALL_SETTINGS = (TF32, FP32, BF16_RECOMPUTE, BF16_ACCUM4)
TEXT_CORE = (TEXT_BF16, TEXT_TF32)
TEXT_MORE = (TEXT_FP32, TEXT_FP16_SGD, TEXT_RECOMPUTE, TEXT_ACCUM4)


def jobs() -> list[Job]:
    """Every job of the plan, most useful first (the first shards already span the axes)."""
    first = [
        *_vision("resnet50", (224, 160, 288), CONV_CORE, ALL_SETTINGS + (TIMM_AMP_NHWC, BF16_NHWC)),
        *_vision("vit_base_patch16_224", (224,), VIT_CORE, ALL_SETTINGS),
        *_text("hf_bert_base", (128, 512), TEXT_CORE, TEXT_MORE),
        *_text("hf_gpt2", (512, 1024, 128), TEXT_CORE, TEXT_MORE),
        *_vision("convnext_tiny", (224, 160, 288), CONV_CORE, (TF32, BF16_RECOMPUTE, TIMM_AMP_NHWC)),
        *_vision("efficientnet_b0", (224, 160, 288), CONV_CORE, (TF32, TIMM_AMP_NHWC)),
        *_text("hf_llama_1b", (512, 2048), TEXT_CORE, (TEXT_RECOMPUTE, TEXT_ACCUM4), max_batch=256, cap_s=60.0),
        *_vision("vit_large_patch16_224", (224,), VIT_CORE, (TF32, BF16_RECOMPUTE), cap_s=60.0),
        *_vision("swin_tiny_patch4_window7_224", (224,), VIT_CORE, (TF32,)),
        *_text("bert_large", (128, 512), TEXT_CORE, (TEXT_RECOMPUTE,)),
        *_text("gpt2_med", (1024, 512), TEXT_CORE, (TEXT_RECOMPUTE,)),
        *_text("hf_t5_small_encoder", (128, 512), TEXT_CORE),
        *_vision("coatnet_0_rw_224", (224,), VIT_CORE, (TF32,)),
        *_vision("maxvit_tiny_tf_224", (224,), VIT_CORE),
        *_vision("resnet18", (224, 160, 288), CONV_CORE, (TF32, FP32)),
        *_vision("mobilenetv3_large_100", (224, 160), CONV_CORE, (TF32,)),
        *_vision("deit_small_patch16_224", (224,), VIT_CORE, (TF32,)),
        *_vision("vit_huge_patch14_224", (224,), VIT_CORE, (BF16_RECOMPUTE,), cap_s=60.0),
        *_vision("convnext_large", (224,), CONV_CORE, (BF16_RECOMPUTE,), cap_s=60.0),
    ]
    rest_conv = ("resnet101", "densenet121", "vgg16", "efficientnet_b3", "inception_v3", "dm_nfnet_f0",
                 "seresnext50_32x4d", "cspdarknet53", "ghostnet_100", "repvit_m1", "fastvit_t8",
                 "resnest50d", "res2net50_26w_4s", "dpn92", "xception65", "tresnet_m", "rexnet_100",
                 "mnasnet_100", "ese_vovnet39b", "hgnet_tiny", "convnext_base")
    rest_vit = ("mixer_b16_224", "beit_base_patch16_224", "convit_small", "efficientformer_l1",
                "caformer_s18", "poolformer_s24", "pvt_v2_b2", "edgenext_small", "xcit_small_12_p16_224",
                "tnt_s_patch16_224", "davit_tiny", "gcvit_tiny", "nextvit_small", "focalnet_tiny_srf",
                "swin_base_patch4_window7_224", "inception_next_tiny", "efficientvit_b1",
                "vit_small_patch16_224", "vit_huge_patch14_clip_224")
    rest = []
    for i in range(max(len(rest_conv), len(rest_vit))):  # alternate: each prefix spans both kinds
        rest += _vision(rest_conv[i], (224, 160), CONV_CORE) if i < len(rest_conv) else []
        rest += _vision(rest_vit[i], (224,), VIT_CORE) if i < len(rest_vit) else []
    return first + rest


def make_shards(plan_jobs: list[Job], budget_s: float = SHARD_BUDGET_S) -> list[Shard]:
    """Consecutive jobs packed into shards whose summed cost stays within ``budget_s`` (a job
    costlier than the budget gets a shard of its own)."""
    shards: list[Shard] = []
    current: list[Job] = []
    for job in plan_jobs:
        if current and sum(j.cost_s for j in current) + job.cost_s > budget_s:
            shards.append(Shard(len(shards), tuple(current)))
            current = []
        current.append(job)
    if current:
        shards.append(Shard(len(shards), tuple(current)))
    return shards


def shards() -> list[Shard]:
    """The campaign's shards, in order."""
    return make_shards(jobs())


def next_jobs(all_shards: list[Shard], done_items: set[str], start: int | None = None) -> list[tuple[Shard, Job]]:
    """The jobs still to measure, in plan order, from the first shard with one (``start``: from
    that shard's index on, done or not)."""
    todo = []
    for shard in all_shards:
        if start is not None and shard.index < start:
            continue
        todo += [(shard, j) for j in shard.jobs if start is not None or item_id(shard, j) not in done_items]
    return todo


def done_items(labels_dir: str) -> set[str]:
    """``campaign_item`` of every committed label row: the jobs a slot has measured already."""
    found: set[str] = set()
    for slug in store.device_slugs(labels_dir):
        if storage.exists(storage.join(labels_dir, slug, "labels.parquet")):
            items = store.compact_labels(labels_dir, slug).column("campaign_item")
            found |= {i for i in pc.unique(items).to_pylist() if i}
    return found


def plan_json(all_shards: list[Shard]) -> str:
    """The plan as JSON: the snapshot committed in ``data/campaign/plan-<version>.json``."""
    return json.dumps({"campaign": CAMPAIGN, "shard_budget_s": SHARD_BUDGET_S,
                       "steps": {"train_warmup": TRAIN_WARMUP, "infer_warmup": INFER_WARMUP,
                                 "timed": TIMED_STEPS},
                       "shards": [{"id": s.id, "cost_s": s.cost_s, "jobs": [asdict(j) for j in s.jobs]}
                                  for s in all_shards]}, indent=1, sort_keys=True) + "\n"


# A CPU dry run: timm's tiny test models and a two-layer GPT-2 at small batches, NVML absent.
DRY_RUN_TEXT = {"dry_tiny_gpt2": {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
                                  "n_embd": 32, "n_layer": 2, "n_head": 2, "vocab_size": 128,
                                  "n_positions": 64}}


def dry_run_shards() -> list[Shard]:
    """Two shards of tiny models, each setting kind once, batches up to 4 (a few seconds on CPU)."""
    cpu_bf16 = Setting("amp-bf16", "adamw")
    return [Shard(0, (Job("test_vit", "timm", 32, (FP32, BF16_RECOMPUTE), max_batch=4, cap_s=20.0),
                      Job("test_efficientnet", "timm", 32, (Setting("fp32", "sgd-momentum", "nhwc"),),
                          max_batch=4, cap_s=20.0))),
            Shard(1, (Job("dry_tiny_gpt2", "transformers", 16,
                          (TEXT_FP32, Setting("amp-bf16", "adamw", "none", grad_accum=2)), max_batch=3,
                          cap_s=20.0),
                      Job("test_vit", "timm", 48, (cpu_bf16,), max_batch=2, cap_s=20.0)))]


__all__ = ["CAMPAIGN", "SHARD_BUDGET_S", "Setting", "Job", "Shard", "item_id", "batch_ladder", "jobs",
           "make_shards", "shards", "next_jobs", "done_items", "plan_json", "DRY_RUN_TEXT", "dry_run_shards"]
