"""The GPU measurement campaign: run the next shard on a GPU slot, then import its rows here.

On the GPU machine (torch, timm, transformers, nvidia-ml-py; no Ray), one prepared command::

    PYTHONPATH=. python3 jobs/gpu_campaign.py --shard next --budget-s 420 --out $OUT

With the machine still warm, a second command of the same slot goes on after the first's
``jobs_done`` (say 3 jobs), within what is left of the slot::

    PYTHONPATH=. python3 jobs/gpu_campaign.py --shard next --skip 3 --budget-s 250 --out $OUT

Back here, with the files that came back (each command's folder)::

    .venv/bin/python jobs/import_labels.py --campaign-run /path/to/files
    .venv/bin/python jobs/label_datasheet.py --all true

Without a GPU (CI, this machine): ``--dry-run`` measures tiny models on the CPU, NVML absent::

    .venv/bin/python jobs/gpu_campaign.py --dry-run --budget-s 120 --out /tmp/campaign-dry

After the shard, where the slot has a minute left, where the step model misses, kernel by kernel::

    PYTHONPATH=. python3 jobs/gpu_campaign.py --profile default --out $OUT/profile

and what the board draws while each kind of kernel runs (about two minutes)::

    PYTHONPATH=. python3 jobs/gpu_campaign.py --power-kernels default --out $OUT/power

``--write-plan`` rewrites the committed plan snapshot (data/campaign/plan-<version>.json).
How and why: docs/gpu-campaign.md.
"""
from __future__ import annotations

import argparse
import json
import logging
import os

from trappm_ray.labels import campaign_plan as plan
from trappm_ray.labels import campaign_power, campaign_profile
from trappm_ray.labels.campaign_run import run

PLAN_FILE = os.path.join("data", "campaign", f"plan-{plan.CAMPAIGN}.json")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shard", default="next", help="'next' (the first job no committed row names) or "
                   "a shard index (that shard and the ones after it, measured again)")
    p.add_argument("--skip", type=int, default=0, help="leave out the first N jobs of the list: a second command "
                   "in the same slot skips what the first measured (its jobs_done, not yet imported)")
    p.add_argument("--budget-s", type=float, default=420.0, help="stop starting jobs past this")
    p.add_argument("--out", default="campaign-out", help="where rows.jsonl and run.json go")
    p.add_argument("--labels", default="data/labels", help="the committed labels ('next' reads them)")
    p.add_argument("--dry-run", action="store_true", help="tiny models on the CPU")
    p.add_argument("--write-plan", action="store_true", help=f"write {PLAN_FILE} and stop")
    p.add_argument("--profile", default="", help="instead of a shard: 'default', or model@size:precision:"
                   "memory_format:batch,... profiled kernel by kernel into <out>/profile.json")
    p.add_argument("--power-kernels", default="", help="instead of a shard: 'default' (every kind) or kinds "
                   f"of {', '.join(campaign_power.PROBES)}, comma-separated: board power while each runs, "
                   "into <out>/power_kernels.json")
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.write_plan:
        os.makedirs(os.path.dirname(PLAN_FILE), exist_ok=True)
        with open(PLAN_FILE, "w") as fh:
            fh.write(plan.plan_json(plan.shards()))
        print(f"wrote {PLAN_FILE}")
        return
    if args.profile:
        specs = (campaign_profile.DRY_RUN if args.dry_run else campaign_profile.DEFAULT) \
            if args.profile == "default" else tuple(args.profile.split(","))
        found = campaign_profile.run_profiles(list(specs), args.out, device="cpu" if args.dry_run else "cuda")
        print(json.dumps([{k: p.get(k) for k in ("model", "setting", "batch", "step_ms_wall", "error")}
                          for p in found], indent=1))
        return
    if args.power_kernels:
        kinds = (campaign_power.DRY_RUN if args.dry_run else tuple(campaign_power.PROBES)) \
            if args.power_kernels == "default" else tuple(args.power_kernels.split(","))
        found = campaign_power.run_power_kernels(list(kinds), args.out, device="cpu" if args.dry_run else "cuda",
                                                 seconds=0.2 if args.dry_run else campaign_power.SECONDS,
                                                 warm_s=0.05 if args.dry_run else campaign_power.WARM_S)
        print(json.dumps([{k: p.get(k) for k in ("kind", "tflops", "tbytes_per_s", "power_w_mean", "error")}
                          for p in found], indent=1))
        return
    shards = plan.dry_run_shards() if args.dry_run else plan.shards()
    start = None if args.shard == "next" else int(args.shard)
    todo = plan.next_jobs(shards, set() if args.dry_run else plan.done_items(args.labels), start)[args.skip:]
    if not todo:
        print("every job of the plan has rows in the committed labels")
        return
    summary = run(todo, args.out, args.budget_s, device="cpu" if args.dry_run else "cuda")
    print(json.dumps({k: summary[k] for k in ("rows", "wall_s", "rows_per_min", "jobs_done",
                                              "next_not_started")}, indent=1))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    main()
