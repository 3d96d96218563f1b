"""Batch-job throughput (models/s) with 1 and 2 actors, and the scaling between them.

    .venv/bin/python benchmarks/batch_predict.py [--copies 384] [--repeats 2] [--device SLUG]
        [--predictor URI | --random] [--onnx PATH[,PATH]] [--json PATH]

Inputs: files under a temporary directory, cycling over the given ONNX files (default: the
ResNet-101 skeleton, exported on first use); each file has a distinct name and distinct bytes
(its doc string numbers the copy), so every run featurizes every file, as distinct models
would be. ``--device`` answers for that device (its shipped or spec-based predictor, the GPU
path with its extra batches) instead of ``--predictor``. The job (``trappm_ray.serving.batch.run``, batch size 32, 4 files per actor
call) runs on one private local Ray cluster with 2 CPUs (after a warm-up job, so Ray itself is
up), for 1 and 2 actors, each over ``--copies`` files and over 4x as many, into empty output
directories, ``--repeats`` times each (the fastest run counts: other work on a 2-core machine
only ever adds time). Two rates per pool size:

* end to end: files / the job's wall time from ``run`` to return, actor startup (which imports
  torch and loads the predictor) included;
* steady state: the extra files of the larger run / its extra seconds, which cancels what both
  runs pay once (startup, planning, writing).

Target: 2 actors >= 1.7x the 1-actor steady-state rate, which needs two free cores.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

import onnx
from bench_predictor import add_common_args, bench_predictor, resnet101


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=384)
    ap.add_argument("--repeats", type=int, default=2, help="runs per size; the fastest counts")
    ap.add_argument("--device", default=None, help="a device's predictor (e.g. rtx3090)")
    add_common_args(ap)
    args = ap.parse_args()
    from trappm_ray.serving.batch import BatchPredictConfig, run
    from trappm_ray.ray_init import ensure_ray

    work = Path(tempfile.mkdtemp(prefix="bench-batch-"))
    predictor = bench_predictor(args.predictor, args.random)
    sources = [resnet101(Path(p)) for p in args.onnx.split(",")]
    sizes = (args.copies, 4 * args.copies)
    models = [onnx.load(str(s), load_external_data=False) for s in sources]
    for n in sizes:
        (work / f"in-{n}").mkdir()
        for i in range(n):
            m = models[i % len(models)]
            m.doc_string = f"copy {i}"  # distinct bytes: nothing is shared between files
            (work / f"in-{n}" / f"m{i:05d}.onnx").write_bytes(m.SerializeToString())
    (work / "warm").mkdir()
    shutil.copy(sources[0], work / "warm" / "w.onnx")

    ensure_ray(num_cpus=2)
    cpus = len(os.sched_getaffinity(0))
    base = dict(predictor=predictor, batch_size=32, device=args.device)
    run(BatchPredictConfig(src=str(work / "warm"), dst=str(work / "out-warm"), **base))
    res = {"copies": list(sizes), "inputs": [str(s) for s in sources], "cpus_usable": cpus,
           "load_avg_before": os.getloadavg()[0]}
    for actors in (1, 2):
        seconds = {}
        for n in sizes:
            times = []
            for rep in range(args.repeats):
                s = run(BatchPredictConfig(src=str(work / f"in-{n}"),
                                           dst=str(work / f"out-{actors}-{n}-{rep}"),
                                           actors=actors, **base))
                assert s.ok == n and s.errors == 0, s
                times.append(s.seconds)
            seconds[n] = min(times)
        small, large = sizes
        res[f"actors_{actors}"] = {
            "seconds": seconds, "end_to_end_models_per_s": large / seconds[large],
            "steady_models_per_s": (large - small) / (seconds[large] - seconds[small])}
    res["load_avg_after"] = os.getloadavg()[0]
    res["scaling"] = res["actors_2"]["steady_models_per_s"] / res["actors_1"]["steady_models_per_s"]
    res["scaling_end_to_end"] = (res["actors_2"]["end_to_end_models_per_s"]
                                 / res["actors_1"]["end_to_end_models_per_s"])
    res["pass"] = res["scaling"] >= 1.7
    print(f"{sizes[0]} and {sizes[1]} files ({', '.join(s.name for s in sources)}), batch 32, "
          f"{cpus} usable CPU(s), load avg {res['load_avg_before']:.1f} before, "
          f"{res['load_avg_after']:.1f} after")
    for actors in (1, 2):
        r = res[f"actors_{actors}"]
        print(f"{actors} actor(s): steady {r['steady_models_per_s']:7.2f} models/s, end to end "
              f"{r['end_to_end_models_per_s']:7.2f} models/s ({sizes[1]} files in "
              f"{r['seconds'][sizes[1]]:.1f} s, {sizes[0]} in {r['seconds'][sizes[0]]:.1f} s)")
    print(f"scaling 1 -> 2 actors: steady {res['scaling']:.2f}x (target >= 1.7x: "
          f"{'PASS' if res['pass'] else 'FAIL'}), end to end {res['scaling_end_to_end']:.2f}x")
    if cpus < 2:
        print("note: this process may use only one CPU (taskset?): two actors share it")
    shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
