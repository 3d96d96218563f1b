"""Batch-job throughput (models/s) with 1 and 2 actors, and the scaling between them.

    .venv/bin/python benchmarks/batch_predict.py [--copies 96] [--predictor URI | --random]
                                                 [--onnx PATH[,PATH]] [--json PATH]

Inputs: ``--copies`` files under a temporary directory, cycling over the given ONNX files
(default: the ResNet-101 skeleton, exported on first use); each file gets a distinct name, so
every run predicts every file. The job (``trappm_ray.batch_predict.run``, batch size 32, its default of
4 files per actor call) runs once with 1 actor and once with 2, each into an empty output
directory, on one private local Ray cluster with 2 CPUs (a warm-up job runs first, so Ray
itself is up). models/s = files / the job's wall time from ``run`` to return, actor startup
(which imports torch) included. Target: 2 actors >= 1.7x the 1-actor rate, which needs two
free cores and enough files to amortize the actors' startup.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

from bench_predictor import add_common_args, bench_predictor, resnet101



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=96)
    add_common_args(ap)
    args = ap.parse_args()
    from trappm_ray.batch_predict import BatchPredictConfig, run
    from trappm_ray.ray_init import ensure_ray

    work = Path(tempfile.mkdtemp(prefix="bench-batch-"))
    predictor = bench_predictor(args.predictor, args.random)
    sources = [resnet101(Path(p)) for p in args.onnx.split(",")]
    src = work / "in"
    src.mkdir()
    for i in range(args.copies):
        shutil.copy(sources[i % len(sources)], src / f"m{i:04d}.onnx")
    (work / "warm").mkdir()
    shutil.copy(sources[0], work / "warm" / "w.onnx")

    ensure_ray(num_cpus=2)
    cpus = len(os.sched_getaffinity(0))
    base = dict(predictor=predictor, batch_size=32)
    run(BatchPredictConfig(src=str(work / "warm"), dst=str(work / "out-warm"), **base))
    res = {"copies": args.copies, "inputs": [str(s) for s in sources], "cpus_usable": cpus,
           "load_avg": os.getloadavg()[0]}
    for actors in (1, 2):
        s = run(BatchPredictConfig(src=str(src), dst=str(work / f"out-{actors}"), actors=actors, **base))
        assert s.ok == args.copies and s.errors == 0, s
        res[f"actors_{actors}"] = {"seconds": s.seconds, "models_per_s": s.predicted / s.seconds}
    res["scaling"] = res["actors_2"]["models_per_s"] / res["actors_1"]["models_per_s"]
    res["pass"] = res["scaling"] >= 1.7
    print(f"{args.copies} files ({', '.join(s.name for s in sources)}), batch 32, "
          f"{cpus} usable CPU(s), load avg {res['load_avg']:.1f}")
    for actors in (1, 2):
        r = res[f"actors_{actors}"]
        print(f"{actors} actor(s): {r['models_per_s']:7.2f} models/s  ({r['seconds']:.1f} s)")
    print(f"scaling 1 -> 2 actors: {res['scaling']:.2f}x  (target >= 1.7x: "
          f"{'PASS' if res['pass'] else 'FAIL'})")
    if cpus < 2:
        print("note: this process may use only one CPU (taskset?): two actors share it")
    shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
