"""Test MAPE of the shipped recipe on two label sets of one device, restricted to the same keys.

    .venv/bin/python experiments/label_sets.py [--old data/labels-2026-11-22] [--new data/labels]
        [--target train_step_ms] [--seeds 1337,1338,1339] [--work artifacts/label-sets]

Keeps the (arch, resolution, batch size) keys that are ok in both sets of the device with the
most labels in ``--old``, writes each set's rows on those keys with ``--old``'s graphs under
``--work``, and fits the ``trappm-ray`` recipe on each with ``recipe_variants.py`` (same
splits, same seeds, same encoder, a private local Ray). Prints both MAPEs and new / old: how much
of the error is the labels, since the model, the graphs and the rows are the same.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys


def write_like_for_like(old: str, new: str, work: str) -> dict:
    """``<work>/{old,new}/<slug>/labels.parquet`` on the keys ok in both, plus the graphs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trappm_ray.labels import store
    from trappm_ray.graph.rows import GRAPHS_FILE
    from trappm_ray.labels.examples import GRAPH_KEY
    from trappm_ray.labels.store import default_slug

    slug = default_slug(old)
    tables = {"old": store.read_rows(old, slug), "new": store.read_rows(new, slug)}
    keys = {name: list(zip(*(t.column(k).to_pylist() for k in GRAPH_KEY))) for name, t in tables.items()}
    both = set.intersection(*({k for k, s in zip(keys[name], t.column("status").to_pylist()) if s == "ok"}
                              for name, t in tables.items()))
    for name, t in tables.items():
        os.makedirs(os.path.join(work, name, slug), exist_ok=True)
        pq.write_table(t.filter(pa.array([k in both for k in keys[name]])),
                       os.path.join(work, name, slug, "labels.parquet"))
        shutil.copyfile(os.path.join(old, GRAPHS_FILE), os.path.join(work, name, GRAPHS_FILE))
    return {"slug": slug, "keys": len(both), "sweeps": len({k[:2] for k in both})}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", default="data/labels-2026-11-22")
    p.add_argument("--new", default="data/labels")
    p.add_argument("--target", default="train_step_ms")
    p.add_argument("--seeds", default="1337,1338,1339")
    p.add_argument("--work", default="artifacts/label-sets")
    args = p.parse_args()
    info = write_like_for_like(args.old, args.new, args.work)
    print(f"{info['slug']}: {info['keys']} keys ok in both sets, {info['sweeps']} sweeps", flush=True)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "recipe_variants.py")
    mape = {}
    for name in ("old", "new"):
        out = os.path.join(args.work, f"{name}-{args.target}.json")
        subprocess.run([sys.executable, script, "--labels", os.path.join(args.work, name),
                        "--target", args.target, "--seeds", args.seeds, "--variants", "",
                        "--json", out], check=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, RAY_ADDRESS="local"))  # a private cluster, never a running one
        with open(out) as f:
            per_seed = json.load(f)["results"]["baseline"]["mape"]
        mape[name] = sum(per_seed.values()) / len(per_seed)
        print(f"{name}: {args.target} test MAPE {mape[name]:.2f}% (mean over seeds "
              f"{', '.join(f'{v:.2f}' for v in per_seed.values())})", flush=True)
    print(f"new / old: {mape['new'] / mape['old']:.3f}")


if __name__ == "__main__":
    main()
