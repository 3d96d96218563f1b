"""Reader of the public GPU power measurements (``../shared/data/public-power``) as label rows.

Zeus (``zeus/summary_power_{p100,rtx6000,v100}.csv``; You et al., NSDI'23): one training workload
on one GPU per (batch size, optimizer, power limit), with the time of one epoch and the GPU's
average power over it. A row here is one such measurement: ``power_limit_w`` the limit, ``power_w_mean``
the average power, ``train_step_ms`` the epoch's time over its iterations (``samples_per_epoch``
over the batch, rounded up).

Samples per epoch (``SAMPLES``, SOURCES.md there): CIFAR-100's and ILSVRC-2012's training splits
(dataset facts; the full ImageNet split is not verified), SQuAD v1.1's 87,599 questions (long
contexts split into more features are not counted), and 425,000 for Sentiment140: the Capriccio
slice the source's README names (with the full 1,600,000 the step model, a near-bound, would read
1.8-3.7x slower than the measured iterations; with 425,000 it reads 0.5-1.0x, as on the other
workloads). DeepSpeech2 on LibriSpeech and NCF on MovieLens-1M are left out: the source has no
model code for them and their samples per epoch are not stated.

The data loader's share of an epoch is unknown and stays in ``train_step_ms``: a Zeus iteration is
the loader and the step together, so a step model's time is a lower bound on it (the power
evaluation, :mod:`trappm_ray.evaluate.power`, measures how much of each iteration the GPU worked).
Precision fp32 and the board variants are not stated (taken as fp32 and the PCIe boards).
"""
from __future__ import annotations

import csv
import math
import os

from trappm_ray.labels.public_rows import Source, measurement

ZEUS = Source("zeus", "ml-energy/zeus", "75a8b93", "Apache-2.0")
ZEUS_GPUS = {"p100": "p100-pcie-16gb", "rtx6000": "quadro-rtx-6000", "v100": "v100-pcie-32gb"}
# (dataset, network) -> (arch, input size: pixels or tokens, family, model source)
ZEUS_MODELS = {("cifar100", "shufflenetv2"): ("cifar_shufflenetv2", 32, "shufflenet", "workload"),
               ("imagenet", "resnet50"): ("torchvision_resnet50", 224, "resnet", "torchvision"),
               ("sentiment140", "bert_base_uncased"): ("bert_base_cls", 128, "bert", "workload"),
               ("squad", "bert_base_uncased"): ("bert_base_qa", 384, "bert", "workload")}
SAMPLES = {"cifar_shufflenetv2": 50_000, "torchvision_resnet50": 1_281_167, "bert_base_cls": 425_000,
           "bert_base_qa": 87_599}
ZEUS_METHOD = ("Zeus trace (examples/research_reproducibility/zeus_nsdi23/trace/): one training epoch per "
               "(batch size, optimizer, power limit) set through NVML, its time and the GPU's average power "
               "(NVML samples); train_step_ms = time_per_epoch / ceil(samples_per_epoch / batch_size), the data "
               "loader included; measured once; precision and software versions not stated (fp32 taken)")


def read_zeus(folder: str) -> tuple[list[dict], list[str]]:
    """Zeus's rows of the workloads with a model here (see the module docstring)."""
    out: list[dict] = []
    issues: list[str] = []
    for gpu, spec in ZEUS_GPUS.items():
        name = f"summary_power_{gpu}.csv"
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            issues.append(f"{name}: missing")
            continue
        left_out: set[str] = set()
        with open(path, newline="") as fh:
            for i, r in enumerate(csv.DictReader(fh)):
                model = ZEUS_MODELS.get((r.get("dataset"), r.get("network")))
                if model is None:
                    left_out.add(f"{r.get('dataset')}/{r.get('network')}")
                    continue
                arch, size, family, source = model
                try:
                    batch, limit = int(r["batch_size"]), float(r["power_limit"])
                    epoch_s, watts = float(r["time_per_epoch"]), float(r["average_power"])
                except (KeyError, TypeError, ValueError) as e:
                    out.append(measurement(ZEUS, spec, "fp32", "train_step_ms", None, arch=arch,
                                           source_file=f"{name} row {i}", error=f"row {i}: unreadable ({e})"))
                    continue
                bad = batch <= 0 or limit <= 0 or watts <= 0 or not math.isfinite(epoch_s)
                iterations = math.ceil(SAMPLES[arch] / batch) if batch > 0 else 1
                out.append(measurement(
                    ZEUS, spec, "fp32", "train_step_ms", epoch_s * 1e3 / iterations, arch=arch, family=family,
                    resolution=size, seq_len=size if family == "bert" else None, batch_size=batch,
                    optimizer=r.get("optimizer"), memory_format="nchw" if family != "bert" else "none", gpus=1,
                    parallelism="single", compiled="none", recompute="none", grad_accum=1,
                    power_limit_w=limit, power_w_mean=watts, samples_per_epoch=SAMPLES[arch],
                    model_source=source, method=ZEUS_METHOD,
                    source_file=f"examples/research_reproducibility/zeus_nsdi23/trace/{name} row {i}",
                    error=f"row {i}: batch, limit or power not positive" if bad else None))
        issues += [f"{name}: {w} left out (no model code in the source)" for w in sorted(left_out)]
    return out, issues


__all__ = ["ZEUS", "ZEUS_GPUS", "ZEUS_MODELS", "SAMPLES", "read_zeus"]
