"""One regressor training epoch on one CPU thread: on the nodes (baseline) and on node classes.

    .venv/bin/python benchmarks/regressor_epoch.py [--graphs 400] [--repeats 3] [--labels data/labels]

Takes ``--graphs`` labeled graphs of the device with the most labels (seeded sample), collates
them into mini-batches of 32 as training does, and times a forward + backward + Adam epoch of the
shipped recipe's regressor both ways (median of ``--repeats``, after one warm-up epoch each). Also
prints the class counts per graph, the time to compute the classes, and the largest difference
between the two predictions of an untrained model.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from trappm_ray.labels.examples import load_examples
from trappm_ray.labels.store import default_slug
from trappm_ray.model.predictor import Scaler
from trappm_ray.train.regressors import RECIPES, minibatches, scaled_forward, build_regressor, for_target, prepare


def epoch_seconds(model, scaler, batches, y) -> float:
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    model.train()
    t0 = time.perf_counter()
    for b, e, part in batches:
        loss = torch.nn.functional.huber_loss(scaled_forward(model, scaler, b, e), scaler.y(y[part]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--labels", default="data/labels")
    p.add_argument("--graphs", type=int, default=400)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(1)
    ex = load_examples(args.labels, default_slug(args.labels), "v2", ("train_step_ms",))
    pick = np.random.default_rng(0).choice(len(ex), min(args.graphs, len(ex)), replace=False)
    plain = prepare([ex.data[i] for i in pick], classes=False)
    t0 = time.perf_counter()
    data = prepare([ex.data[i] for i in pick])
    prep_s = time.perf_counter() - t0  # neighbour means included, as in training
    y = torch.tensor(ex.column("train_step_ms")[pick], dtype=torch.float32).unsqueeze(1)
    emb = torch.randn(len(data), 64)  # the frozen encoder's output: its values do not change the cost
    recipe = for_target(RECIPES["trappm-ray"], "train_step_ms")
    scaler = Scaler.fit(torch.cat([d.static for d in data]), emb, y)
    idx = np.arange(len(data))
    runs = {"nodes": minibatches(plain, emb, idx, recipe.batch_size, None, False),
            "classes": minibatches(data, emb, idx, recipe.batch_size, None, True)}
    torch.manual_seed(0)
    model = build_regressor(data[0], emb.size(1), recipe).eval()
    with torch.no_grad():
        preds = {k: torch.cat([scaled_forward(model, scaler, b, e) for b, e, _ in v]) for k, v in runs.items()}
    times = {}
    for name, batches in runs.items():
        epoch_seconds(model, scaler, batches, y)  # warm-up
        times[name] = statistics.median(epoch_seconds(model, scaler, batches, y)
                                        for _ in range(args.repeats))
    mean = lambda f: float(np.mean([f(d) for d in data]))  # noqa: E731
    print(f"graphs {len(data)} (device {default_slug(args.labels)}): per graph "
          f"{mean(lambda d: d.num_nodes):.0f} nodes, {mean(lambda d: d.edge_index.size(1)):.0f} edges -> "
          f"{mean(lambda d: d.u_x.size(0)):.0f} first-layer classes, "
          f"{mean(lambda d: d.u_root.size(0)):.0f} second-layer classes, "
          f"{mean(lambda d: d.u_src.size(0)):.0f} class edges")
    print(f"prepare with classes: {prep_s * 1e3 / len(data):.1f} ms per graph")
    diff = float((preds["nodes"] - preds["classes"]).abs().max() / preds["nodes"].abs().mean())
    print(f"max |nodes - classes| prediction difference: {diff:.1e} of the mean |prediction|")
    print(f"epoch on nodes (baseline): {times['nodes']:.3f} s; on classes: {times['classes']:.3f} s; "
          f"speed-up {times['nodes'] / times['classes']:.2f}x")


if __name__ == "__main__":
    main()
