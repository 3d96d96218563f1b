"""Speed of the CUDA training-memory model against featurize, on the same graphs in one run.

Run from the repository root:

    .venv/bin/python benchmarks/memory_model.py [--repeat 30] [--archs A,B,...] [--json PATH]

Inputs: timm skeletons at 224 px exported once with ``trappm_ray.corpus.zoo.export_skeleton``
and cached in ``artifacts/bench/memory/`` (ResNet-101 first, then graphs from ~70 to ~6,500
nodes for the linearity check). For each graph at batch 32, after 2 warm-ups, ``--repeat``
interleaved runs of:
  (a) the baseline, ``featurize(onnx_bytes, batch_size=32)``;
  (b) ``training_memory(graph, "amp-fp16", "sgd-momentum", folded_norm=mask)`` end to end (the
      structural walk included), and (c) the same with a precomputed walk (the cost of each
      further batch size or precision on one graph).
Reported: medians (ms; wall clock, and process CPU time of (b), which other work on the machine
inflates less), memory/featurize ratios (wall), and a least-squares fit of (b)'s CPU time
against nodes (us per node, R^2). Target: (b) <= 5 ms for ResNet-101 at batch 32. The process is pinned to one
CPU; timings depend on the machine's load, which is printed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

DEFAULT_ARCHS = ("resnet101,resnet18,mobilenetv3_large_100,resnet50,densenet121,"
                 "vit_base_patch16_224,efficientnet_b3,swin_base_patch4_window7_224")
CACHE = "artifacts/bench/memory"


def skeleton(arch: str, res: int = 224) -> bytes:
    """The cached ONNX skeleton of ``arch`` (exported on first use)."""
    path = os.path.join(CACHE, f"{arch}@{res}.onnx")
    if not os.path.exists(path):
        from trappm_ray.corpus.zoo import export_skeleton

        os.makedirs(CACHE, exist_ok=True)
        with open(path + ".part", "wb") as f:
            f.write(export_skeleton(arch, res).onnx_bytes)
        os.replace(path + ".part", path)
    with open(path, "rb") as f:
        return f.read()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--archs", default=DEFAULT_ARCHS)
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    import onnx

    from trappm_ray.graph.featurize import featurize
    from trappm_ray.physics.folded_norm import folded_norm_mask
    from trappm_ray.physics.graph_walk import walk
    from trappm_ray.physics.memory import training_memory

    print(f"load average: {os.getloadavg()[0]:.2f}")
    print(f"{'arch':32s} {'nodes':>6s} {'featurize':>10s} {'memory':>8s} {'mem cpu':>8s} "
          f"{'walked':>8s} {'mem/feat':>9s} {'peak MiB':>9s}")
    results = []
    for arch in a.archs.split(","):
        data = skeleton(arch)
        mask = folded_norm_mask(onnx.load_from_string(data))
        graph = featurize(data, batch_size=a.batch)
        walked = walk(graph, mask)
        runs = {"featurize": [], "memory": [], "walked": [], "memory_cpu": []}
        for i in range(a.repeat + 2):
            t0 = time.perf_counter()
            featurize(data, batch_size=a.batch)
            t1, c1 = time.perf_counter(), time.process_time()
            est = training_memory(graph, "amp-fp16", "sgd-momentum", folded_norm=mask)
            t2, c2 = time.perf_counter(), time.process_time()
            training_memory(graph, "amp-fp16", "sgd-momentum", walked=walked)
            t3 = time.perf_counter()
            if i >= 2:
                for k, dt in zip(runs, (t1 - t0, t2 - t1, t3 - t2, c2 - c1)):
                    runs[k].append(dt * 1e3)
        med = {k: statistics.median(v) for k, v in runs.items()}
        row = {"arch": arch, "nodes": graph.num_nodes, **{f"{k}_ms": v for k, v in med.items()},
               "ratio_memory_featurize": med["memory"] / med["featurize"],
               "device_used_mib": est.device_used / 2**20}
        results.append(row)
        print(f"{arch:32s} {graph.num_nodes:6d} {med['featurize']:10.2f} {med['memory']:8.2f} "
              f"{med['memory_cpu']:8.2f} {med['walked']:8.2f} {row['ratio_memory_featurize']:9.3f} "
              f"{row['device_used_mib']:9.0f}", flush=True)
    xs = [r["nodes"] for r in results]
    ys = [r["memory_cpu_ms"] for r in results]  # process CPU time: robust to other load
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    icpt = my - slope * mx
    ss_res = sum((y - icpt - slope * x) ** 2 for x, y in zip(xs, ys))
    ss_tot = sum((y - my) ** 2 for y in ys) or 1.0
    r101 = next((r for r in results if r["arch"] == "resnet101"), None)
    print(f"linear fit of memory CPU time: {icpt:.3f} ms + {slope * 1e3:.2f} us/node, "
          f"R^2 = {1 - ss_res / ss_tot:.3f}")
    if r101:
        ok = r101["memory_ms"] <= 5.0
        print(f"ResNet-101 @ batch {a.batch}: {r101['memory_ms']:.2f} ms wall, "
              f"{r101['memory_cpu_ms']:.2f} ms CPU (target <= 5 ms): {'PASS' if ok else 'FAIL'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"results": results, "slope_us_per_node": slope * 1e3,
                       "intercept_ms": icpt, "load_average": os.getloadavg()[0]}, f, indent=1)


if __name__ == "__main__":
    main()
