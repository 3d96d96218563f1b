"""Collect TraPPM labels (train step time, memory, power, inference latency) with Ray.

Examples (from the repository root)::

    # background collection on this CPU machine, default plan, stop launching after 2 h,
    # each measurement waiting until nothing else runs (load average <= 1.5 on 2 cores):
    .venv/bin/python jobs/collect_labels.py --out data/labels --device cpu --time-budget-min 120 \
        --max-load 1.5
    # smoke run: two small models, one resolution
    .venv/bin/python jobs/collect_labels.py --out /tmp/labels-smoke \
        --archs mobilenetv3_small_050,resnet18 --resolutions 64 --batch-sizes 1,2,4,8
    # on a GPU cluster (one task per GPU), writing to S3:
    python jobs/collect_labels.py --out s3://bucket/labels --device cuda --ray-address auto
    # re-measure the sweeps whose timings were taken beside other work, on an idle machine:
    .venv/bin/python jobs/collect_labels.py --out data/labels --device cpu --per-family 20 \
        --corpus artifacts/corpus --remeasure-load-above 1.5 --max-load 1.5
    # measure one device's whole set again on this machine, two one-thread sweeps at a time:
    .venv/bin/ray start --head --num-cpus 2 --resources '{"label_slot": 2}'
    .venv/bin/python jobs/collect_labels.py --out data/labels-next --device cpu --ray-address auto \
        --like data/labels/intel-r-xeon-r-processor-t1/labels.parquet --max-load 2.5
    # merge part files into <out>/<device>/labels.parquet without measuring:
    .venv/bin/python jobs/collect_labels.py --out data/labels --compact-only

Re-running the same command resumes: finished sweeps are skipped. See docs/labels.md.
"""
from __future__ import annotations

import argparse
import json
import logging

from trappm_ray.labels import job as label_job
from trappm_ray.labels import store


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


def parse_args(argv=None) -> tuple[label_job.LabelJobConfig, bool]:
    """Command line -> (config, compact_only)."""
    d = label_job.LabelJobConfig(out="")
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="output directory or URI (s3://...)")
    p.add_argument("--device", default=d.device, choices=("cpu", "cuda"))
    p.add_argument("--archs", default=None, help="comma-separated timm names (default: the plan)")
    p.add_argument("--resolutions", type=_ints, default=d.resolutions)
    p.add_argument("--batch-sizes", type=_ints, default=d.batch_sizes)
    p.add_argument("--dtype", default=d.dtype)
    p.add_argument("--optimizer", default=d.optimizer, choices=("adam", "sgd"))
    p.add_argument("--warmup", type=int, default=None, help="default: CPU 2, CUDA 5")
    p.add_argument("--steps", type=int, default=None, help="default: CPU 10, CUDA 50")
    p.add_argument("--threads", type=int, default=d.threads)
    p.add_argument("--max-timed-seconds", type=float, default=d.max_timed_seconds)
    p.add_argument("--max-step-s", type=float, default=d.max_step_s)
    p.add_argument("--memory-cap-mb", type=float, default=None)
    p.add_argument("--timeout-s", type=float, default=d.timeout_s)
    p.add_argument("--max-tasks", type=int, default=None)
    p.add_argument("--time-budget-min", type=float, default=None)
    p.add_argument("--ray-address", default=None)
    p.add_argument("--corpus", default=None, help="only measure what has graphs in this corpus")
    p.add_argument("--max-params", type=int, default=d.max_params)
    p.add_argument("--per-family", type=int, default=d.per_family)
    p.add_argument("--remeasure-load-above", type=float, default=None,
                   help="re-run sweeps with ok rows measured above this 1-minute load average")
    p.add_argument("--max-load", type=float, default=None,
                   help="wait before each measurement until the 1-minute load average is at most "
                        "this (a measurement alone makes ~1.0)")
    p.add_argument("--max-load-wait-s", type=float, default=d.max_load_wait_s)
    p.add_argument("--like", default=None,
                   help="a stored labels.parquet whose sweeps (each with its batch sizes) to measure "
                        "again, instead of the plan")
    p.add_argument("--compact-only", action="store_true", help="only merge parts, measure nothing")
    a = vars(p.parse_args(argv))
    compact_only = a.pop("compact_only")
    a["archs"] = tuple(a["archs"].split(",")) if a["archs"] else None
    return label_job.LabelJobConfig(**a), compact_only


def main(argv=None) -> None:
    cfg, compact_only = parse_args(argv)
    if compact_only:
        for slug in store.device_slugs(cfg.out):
            print(slug, "->", store.compact(cfg.out, slug))
            print(store.summarize(store.read_rows(cfg.out, slug)))
        return
    summary = label_job.run_label_job(cfg)
    print(json.dumps(summary, indent=1))
    print(store.summarize(store.read_rows(cfg.out, summary["slug"])))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    main()
