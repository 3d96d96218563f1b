"""Re-measure 20 stored labels and print the median and worst relative difference per label.

    taskset -c 1 .venv/bin/python jobs/label_noise.py --out data/labels \
        --slug intel-r-xeon-r-processor-t1 --max-load 1.5
Run it alone on the machine (no label collection at the same time). --max-load draws from rows
measured at most that busy and waits before each re-measurement until the machine is as quiet.
With --against, nothing is measured: the stored set in --out is compared row by row with the
same device's set in another store (new / other ratios per label)::

    .venv/bin/python jobs/label_noise.py --out data/labels --against data/labels-2026-11-22 \
        --slug intel-r-xeon-r-processor-t1
"""
import argparse
import json

from trappm_ray.labels.noise import compare_sets, remeasure

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default="data/labels")
    p.add_argument("--slug", required=True)
    p.add_argument("-n", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-load", type=float, default=None)
    p.add_argument("--against", default=None, help="another label store: compare, measure nothing")
    args = p.parse_args()
    if args.against:
        result = compare_sets(args.against, args.out, args.slug)
    else:
        result = remeasure(args.out, args.slug, args.n, args.seed, args.max_load)
    print(json.dumps(result, indent=1))
