"""GAE pretraining throughput: graphs/s per worker with 1 and 2 DDP workers, and the paper's bill.

Run from the repository root:

    .venv/bin/python benchmarks/pretrain.py [--corpus artifacts/corpus] [--max-graphs 500]
        [--epochs 3] [--batch-size 32] [--dims 1024,512,512,512] [--feature-set v2]
        [--workers 1,2] [--cpus-per-worker 0.5] [--use-gpu auto] [--json PATH]

What it does:

* reads about ``--max-graphs`` graphs (whole shards of a seeded shuffle, so several families)
  into one materialised Ray Dataset, and trains the GAE on that same data with each worker
  count in ``--workers`` in turn (fresh runs, same seed) through ``trappm_ray.train.pretrain``;
* takes the throughput of the last epoch (the first one pays for worker start-up and the input
  pipeline's warm-up): graphs/s and nodes/s per worker and in total; the scaling ratio is the
  total graphs/s of N workers over that of the first worker count, next to the ideal N;
* estimates the paper's schedule (25,053 graphs x 400 epochs) on one device of the kind this
  ran on, from the 1-worker nodes/s and the mean graph size of the corpus, against the
  published 25.6 A100-hours.

Assumptions of the estimate, printed with it: time per epoch scales with the number of nodes
(so the paper's graphs are taken to be as large as ours on average); our mini-batches of
``--batch-size`` graphs, not the paper's batch size 1; the measured device (a CPU here unless
``--use-gpu`` found GPUs). Numbers depend on the machine and its load (printed).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

PAPER_GRAPHS, PAPER_EPOCHS, PAPER_GPU_HOURS = 25_053, 400, 25.6


def _mean_nodes(corpus: str) -> float:
    import pyarrow.compute as pc

    from trappm_ray import storage
    from trappm_ray.corpus.loader import graph_files

    total = count = 0
    for f in graph_files(corpus):
        col = storage.read_table(f, columns=["nodes"]).column("nodes")
        total, count = total + pc.sum(col).as_py(), count + len(col)
    return total / max(count, 1)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default="artifacts/corpus")
    p.add_argument("--max-graphs", type=int, default=500)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--dims", default="1024,512,512,512")
    p.add_argument("--feature-set", default="v2")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--cpus-per-worker", type=float, default=0.5)
    p.add_argument("--use-gpu", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default="")
    args = p.parse_args(argv)

    import ray
    import torch

    from trappm_ray.corpus.loader import read_graphs
    from trappm_ray.train.pretrain import PretrainConfig, pretrain
    from trappm_ray.ray_init import ensure_ray

    ensure_ray()
    ds = read_graphs(args.corpus, max_graphs=args.max_graphs, shuffle_files=True,
                     seed=args.seed).materialize()
    n_graphs = ds.count()
    store = tempfile.mkdtemp(prefix="bench-pretrain-")
    stamp = time.strftime("%H%M%S")
    runs = []
    try:
        for n in [int(w) for w in args.workers.split(",")]:
            cfg = PretrainConfig(
                corpus=args.corpus, feature_set=args.feature_set,
                dims=tuple(int(d) for d in args.dims.split(",")), epochs=args.epochs,
                batch_size=args.batch_size, num_workers=n, use_gpu=args.use_gpu,
                cpus_per_worker=args.cpus_per_worker, storage=store,
                name=f"bench-{stamp}-{n}w", seed=args.seed, max_failures=0)
            r = pretrain(cfg, dataset=ds)
            m = r.metrics
            runs.append({"workers": n, "graphs_per_s": m["graphs_per_s"],
                         "graphs_per_s_per_worker": r.graphs_per_s_per_worker,
                         "nodes_per_s": m["nodes"] / m["epoch_s"], "epoch_s": m["epoch_s"],
                         "graphs_per_epoch": m["graphs"], "loss": r.final_loss,
                         "wall_s": r.wall_s})
    finally:
        shutil.rmtree(store, ignore_errors=True)

    gpus = ray.cluster_resources().get("GPU", 0)
    device = (torch.cuda.get_device_name(0) if gpus and torch.cuda.is_available()
              else f"CPU ({os.cpu_count()} cores)")
    print(f"device: {device}; load average {os.getloadavg()[0]:.1f}; {n_graphs} graphs, "
          f"dims {args.dims}, batch {args.batch_size}, {args.epochs} epochs (last one timed)")
    print(f"{'workers':>7} {'graphs/s':>9} {'per worker':>22} {'nodes/s':>9} {'epoch s':>8}"
          f" {'scaling':>8}")
    base = runs[0]
    for r in runs:
        per = ", ".join(f"{v:.1f}" for v in r["graphs_per_s_per_worker"])
        scale = r["graphs_per_s"] / base["graphs_per_s"]
        r["scaling"] = scale
        print(f"{r['workers']:>7} {r['graphs_per_s']:>9.1f} {per:>22} {r['nodes_per_s']:>9.0f}"
              f" {r['epoch_s']:>8.1f} {scale:>5.2f}x (ideal {r['workers'] / base['workers']:.0f}x)")

    mean_nodes = _mean_nodes(args.corpus)
    one = next((r for r in runs if r["workers"] == 1), base)
    per_worker_nodes_s = one["nodes_per_s"] / one["workers"]
    hours = PAPER_GRAPHS * PAPER_EPOCHS * mean_nodes / per_worker_nodes_s / 3600
    print(f"\npaper schedule ({PAPER_GRAPHS:,} graphs x {PAPER_EPOCHS} epochs) on one {device}: "
          f"~{hours:.1f} h vs the published {PAPER_GPU_HOURS} A100-hours "
          f"({hours / PAPER_GPU_HOURS:.2f}x)")
    print(f"  assumes: cost proportional to nodes; paper graphs average {mean_nodes:.0f} nodes "
          f"like this corpus; batches of {args.batch_size} graphs (paper: 1); "
          f"{per_worker_nodes_s:.0f} nodes/s per worker as measured above")
    out = {"device": device, "graphs": n_graphs, "args": vars(args), "runs": runs,
           "estimate": {"hours": hours, "mean_nodes": mean_nodes, "paper_hours": PAPER_GPU_HOURS,
                        "nodes_per_s_per_worker": per_worker_nodes_s},
           "load_average": os.getloadavg()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
