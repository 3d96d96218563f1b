"""Does the harness's reference step (``ref_step_ms``) track what load does to a label?

    taskset -c 1 .venv/bin/python experiments/label_reference.py [--n 12] [--seed 0] [--json PATH]

Run it alone on a 2-core machine. For ``--n`` stored t1 configurations (seeded sample of ok
rows at 64 px whose stored step is under 1.5 s), it measures each one twice in fresh processes,
one thread on the highest core: once quiet (after waiting for a 1-minute load average <= 1.5),
and once while a one-thread training loop runs on core 0, the kind of neighbour that slowed
the stored labels taken under load. Printed per label and for the reference: the loaded / quiet
ratio (the baseline: how much load moves a label) and the same ratio of label / reference (what
is left after dividing by the reference). A reference that tracks the load gives a normalised
ratio near 1 with a smaller spread than the raw one.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import time


def _neighbour(stop) -> None:
    """One-thread conv training on core 0 until ``stop`` is set."""
    os.sched_setaffinity(0, {0})
    import torch

    torch.set_num_threads(1)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10))
    opt = torch.optim.Adam(net.parameters())
    x, y = torch.randn(16, 3, 96, 96), torch.randint(0, 10, (16,))
    while not stop.is_set():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()


def main() -> None:
    from trappm_ray.labels import store
    from trappm_ray.labels import harness as labels
    from trappm_ray.labels import machine
    from trappm_ray.labels.noise import ratio_summary

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--labels", default="data/labels")
    p.add_argument("--slug", default="intel-r-xeon-r-processor-t1")
    p.add_argument("--n", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    stored = [r for r in store.read_rows(args.labels, args.slug).to_pylist()
              if r["status"] == "ok" and r["resolution"] == 64 and r["train_step_ms"] < 1500]
    sample = random.Random(args.seed).sample(stored, args.n)
    info = machine.device_info("cpu")
    ctx = multiprocessing.get_context("spawn")
    rows = []
    for r in sample:
        spec = labels.MeasureSpec(r["arch"], r["batch_size"], r["resolution"])
        machine.wait_for_load(1.5, 1800.0)
        quiet = labels.measure(spec, info)
        stop = ctx.Event()
        neighbour = ctx.Process(target=_neighbour, args=(stop,), daemon=True)
        neighbour.start()
        time.sleep(5.0)  # past the neighbour's imports: it is training when the measurement starts
        loaded = labels.measure(spec, info)
        stop.set()
        neighbour.join()
        if any(m["status"] != "ok" or m["ref_step_ms"] is None for m in (quiet, loaded)):
            continue  # a measurement or its reference failed: no ratio to take
        row = {"arch": r["arch"], "batch_size": r["batch_size"]}
        for k in ("train_step_ms", "inference_ms", "ref_step_ms"):
            row[f"{k}_quiet"], row[f"{k}_loaded"] = quiet[k], loaded[k]
        rows.append(row)
        print(f"{r['arch']}@64 b{r['batch_size']}: step {quiet['train_step_ms']:.1f} -> "
              f"{loaded['train_step_ms']:.1f} ms, ref {quiet['ref_step_ms']:.2f} -> "
              f"{loaded['ref_step_ms']:.2f} ms", flush=True)
    out = {"measured_on": info, "rows": rows, "summary": {}}
    ref = [x["ref_step_ms_loaded"] / x["ref_step_ms_quiet"] for x in rows]
    out["summary"]["ref_step_ms"] = ratio_summary(ref)
    for k in ("train_step_ms", "inference_ms"):
        raw = [x[f"{k}_loaded"] / x[f"{k}_quiet"] for x in rows]
        out["summary"][k] = {"raw": ratio_summary(raw),
                             "per_reference": ratio_summary([a / b for a, b in zip(raw, ref)])}
    print(f"\n{len(rows)} configurations; loaded / quiet ratios (median, p10-p90, median |ratio - 1|):")
    fmt = lambda s: (f"{s['ratio_median']:.3f} ({s['ratio_p10']:.3f}-{s['ratio_p90']:.3f}), "  # noqa: E731
                     f"{s['abs_diff_median']:.3f}")
    print(f"  ref_step_ms             {fmt(out['summary']['ref_step_ms'])}")
    for k in ("train_step_ms", "inference_ms"):
        print(f"  {k:<22}  raw {fmt(out['summary'][k]['raw'])}   / reference "
              f"{fmt(out['summary'][k]['per_reference'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
