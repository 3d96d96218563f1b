"""Compare the graph memory model with PyTorch's own accounting on fake CUDA tensors (no GPU).

    .venv/bin/python experiments/memory_vs_torch.py [--archs resnet18,resnet50,...] [--batch 32]
    .venv/bin/python experiments/memory_vs_torch.py --cpu-labels

PyTorch side: the timm model's parameters are ``FakeTensor``s on device ``cuda`` (no memory,
no GPU needed), autocast float16 is switched on through the low-level API (``torch.autocast``
refuses without a GPU), and ``torch.autograd.graph.saved_tensors_hooks`` records every tensor
autograd keeps for backward during forward + loss. Unique storages are summed, split into
activations and autocast's half copies of the weights. Backward itself cannot run on fake CUDA
tensors here (the autograd engine asks the CUDA driver for a primary context), so the peak of
backward and the allocator are not compared; the saved activations, which dominate, are.
timm's fused attention is switched off (``TIMM_FUSED_ATTN=0``) so that PyTorch runs the
explicit softmax attention the ONNX graph describes.

With ``--cpu-labels``: the sanity check against the committed CPU labels (see ``cpu_labels``).

Model side: the same architecture exported by ``trappm_ray.corpus.zoo.export_skeleton``,
featurized at the batch size, ``training_memory(...).saved_at_backward``.
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("TIMM_FUSED_ATTN", "0")

import torch

MiB = 2**20
_VIEW_GRADS = ("TBackward", "ViewBackward", "TransposeBackward", "PermuteBackward",
               "ExpandBackward", "UnsafeViewBackward", "ReshapeAliasBackward")


def _is_weight_copy(t) -> bool:
    """A saved tensor that is autocast's half copy of a parameter (possibly transposed)."""
    fn = t.grad_fn
    for _ in range(3):
        if fn is None:
            return False
        name = type(fn).__name__
        if name.startswith("ToCopyBackward"):
            nxt = fn.next_functions[0][0] if fn.next_functions else None
            return nxt is not None and type(nxt).__name__ == "AccumulateGrad"
        if not name.startswith(_VIEW_GRADS):
            return False
        fn = fn.next_functions[0][0] if fn.next_functions else None
    return False


def torch_saved(arch: str, batch: int, res: int, amp: bool) -> dict:
    """Bytes autograd keeps for backward in one forward + cross-entropy of ``arch`` (fake CUDA)."""
    import timm
    from torch._subclasses.fake_tensor import FakeTensorMode

    with torch.device("meta"):  # build without memory; fake CUDA tensors replace the state
        model = timm.create_model(arch, pretrained=False)
    model.train()
    seen: dict[int, tuple] = {}
    with FakeTensorMode():
        state = {}
        for k, v in list(model.named_parameters()) + list(model.named_buffers()):
            f = torch.empty(v.shape, dtype=v.dtype, device="cuda")
            state[k] = f.requires_grad_(True) if isinstance(v, torch.nn.Parameter) else f
        skip = {v.untyped_storage()._cdata for v in state.values()}

        def pack(t):
            key = t.untyped_storage()._cdata
            if key not in skip:
                seen[key] = (t.untyped_storage().nbytes(), _is_weight_copy(t))
            return t

        x = torch.randn(batch, 3, res, res, device="cuda")
        y = torch.randint(0, 1000, (batch,), device="cuda")
        if amp:
            torch.set_autocast_enabled("cuda", True)
            torch.set_autocast_dtype("cuda", torch.float16)
            torch.autocast_increment_nesting()
        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                out = torch.func.functional_call(model, state, (x,))
                torch.nn.functional.cross_entropy(out, y)
        finally:
            if amp:
                torch.autocast_decrement_nesting()
                torch.set_autocast_enabled("cuda", False)
    return {"activations": sum(n for n, w in seen.values() if not w),
            "weight_copies": sum(n for n, w in seen.values() if w),
            "input": batch * 3 * res * res * 4}


def model_saved(arch: str, batch: int, res: int, amp: bool) -> dict:
    """The memory model's saved activations for the same architecture (export + featurize)."""
    from trappm_ray.corpus.zoo import export_skeleton
    from trappm_ray.graph.featurize import featurize
    from trappm_ray.physics.folded_norm import folded_norm_mask
    from trappm_ray.physics.memory import training_memory

    sk = export_skeleton(arch, res)
    import onnx

    proto = onnx.load_from_string(sk.onnx_bytes)
    g = featurize(sk.onnx_bytes, batch_size=batch)
    est = training_memory(g, precision="amp-fp16" if amp else "fp32", optimizer="sgd",
                          folded_norm=folded_norm_mask(proto))
    return {"activations": est.saved_at_backward - est.input_bytes,
            "weight_copies": est.weight_cast_cache, "allocated": est.allocated,
            "device_used": est.device_used}


def cpu_labels(labels: str = "data/labels", slug: str = "intel-r-xeon-r-processor-t1") -> None:
    """Sanity check on the committed CPU labels: predicted vs measured memory above baseline.

    CPU rows measure peak RSS above the process baseline (weights, gradients, Adam state,
    activations and malloc slack; fp32, Adam, ``zero_grad(set_to_none=True)``). The model runs
    with the same settings, no CUDA context and single-tensor optimizer loops (PyTorch's CPU
    default). Two figures: the ratio of totals, and, per (arch, resolution) with >= 3 batch
    sizes, the ratio of least-squares slopes in batch size (bytes per sample: the activation
    terms alone, free of constant offsets). Graphs: ``<labels>/graphs.parquet`` (no node
    names there, so folded BatchNorms are guessed from the graph).
    """
    import numpy as np
    import pyarrow.parquet as pq

    from trappm_ray.graph.rows import row_to_graph
    from trappm_ray.physics.memory import training_memory

    lab = pq.read_table(f"{labels}/{slug}/labels.parquet").to_pylist()
    measured = {(r["arch"], r["resolution"], r["batch_size"]): r for r in lab
                if r["status"] == "ok" and r["mem_above_baseline_mb"] is not None}
    rows = []
    for g in pq.read_table(f"{labels}/graphs.parquet").to_pylist():
        key = (g["arch"], g["resolution"], g["batch_size"])
        if key not in measured:
            continue
        r = measured[key]
        est = training_memory(row_to_graph(g), precision="fp32", optimizer=r["optimizer"],
                              foreach=False, context=0.0)
        rows.append((key, g["family"], est.allocated / MiB, r["mem_above_baseline_mb"]))
    ratio = np.array([p / m for _, _, p, m in rows if m > 0])
    print(f"CPU labels ({slug}): {len(rows)} rows; predicted allocated / measured RSS above "
          f"baseline: median {np.median(ratio):.3f}, p10 {np.quantile(ratio, 0.1):.3f}, "
          f"p90 {np.quantile(ratio, 0.9):.3f}")
    by: dict = {}
    for (arch, res, b), fam, p_, m in rows:
        by.setdefault((arch, res, fam), []).append((b, p_, m))
    slopes, fam_slopes = [], {}
    for (arch, res, fam), pts in by.items():
        if len({b for b, _, _ in pts}) < 3:
            continue
        b, p_, m = (np.array(v, float) for v in zip(*pts))
        sp, sm = np.polyfit(b, p_, 1)[0], np.polyfit(b, m, 1)[0]
        if sm > 0:
            slopes.append(sp / sm)
            fam_slopes.setdefault(fam, []).append(sp / sm)
    slopes = np.array(slopes)
    print(f"per-sample slope ratio (activation terms), {len(slopes)} sweeps: median "
          f"{np.median(slopes):.3f}, p10 {np.quantile(slopes, 0.1):.3f}, "
          f"p90 {np.quantile(slopes, 0.9):.3f}")
    for fam, v in sorted(fam_slopes.items()):
        print(f"  {fam:14s} {len(v):3d} sweeps, median slope ratio {np.median(v):.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--archs", default="resnet18,resnet50,vit_small_patch16_224,convnext_tiny")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--res", type=int, default=224)
    p.add_argument("--cpu-labels", action="store_true",
                   help="run the CPU-label sanity check instead of the FakeTensor comparison")
    a = p.parse_args()
    if a.cpu_labels:
        cpu_labels()
        return
    print(f"{'arch':26s} {'prec':5s} {'torch act MiB':>13s} {'model act MiB':>13s} {'ratio':>6s}"
          f" {'torch wcopy':>11s} {'model wcopy':>11s}")
    for arch in a.archs.split(","):
        for amp in (True, False):
            t = torch_saved(arch, a.batch, a.res, amp)
            m = model_saved(arch, a.batch, a.res, amp)
            print(f"{arch:26s} {'amp' if amp else 'fp32':5s} {t['activations'] / MiB:13.1f} "
                  f"{m['activations'] / MiB:13.1f} {m['activations'] / t['activations']:6.3f} "
                  f"{t['weight_copies'] / MiB:11.1f} {m['weight_copies'] / MiB:11.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
