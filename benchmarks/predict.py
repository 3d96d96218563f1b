"""Single-prediction latency on one core: ResNet-101 at batch 32, end to end.

    .venv/bin/python benchmarks/predict.py [--repeat 30] [--predictor URI] [--device SLUG] [--onnx PATH]
                                           [--json PATH]

End to end = read the ONNX file + featurize at batch 32 + the seed ensemble
(``trappm_ray.serving.api.predict(path, 32, predictor=...)``, predictor already loaded). Baselines from
the same run: featurize alone (the floor the API cannot beat) and the ensemble alone; the ratio
e2e / featurize is the API's overhead. The first call, predictor load included, is reported as
"cold". Target: e2e median <= 50 ms on the CPU predictor, e2e <= 2x featurize on a GPU one
(``--device rtx3090``: the answer's passes after the network, batch envelope and anchors
included). Without a shipped default predictor, ``--predictor`` is needed, or ``--random``
times an untrained predictor of the shipped recipe's shape.
"""
from __future__ import annotations

import argparse
import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy / torch are imported: "one core"

import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from bench_predictor import add_common_args, bench_predictor, resnet101  # noqa: E402

TARGET_MS = 50.0


def ms(times: list[float]) -> dict:
    s = sorted(times)
    return {"median": 1e3 * statistics.median(s), "p90": 1e3 * s[int(0.9 * (len(s) - 1))],
            "min": 1e3 * s[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--device", default=None, help="a device's predictor (e.g. rtx3090) instead of --predictor")
    add_common_args(ap, predictor=None)
    args = ap.parse_args()
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    import torch

    torch.set_num_threads(1)
    from trappm_ray.graph.featurize import featurize
    from trappm_ray.model.options import resolve
    from trappm_ray.serving import api as P

    path = str(resnet101(Path(args.onnx)))
    b = args.batch_size
    where = {"device": args.device} if args.device else {"predictor": bench_predictor(args.predictor, args.random)}

    t0 = time.perf_counter()
    first = P.predict(path, b, **where)
    cold = time.perf_counter() - t0
    pred = P.load_predictor(where.get("predictor"), args.device)
    setting = resolve({}, pred.manifest)
    graph = featurize(path, batch_size=b)
    e2e, feat, ens = [], [], []
    for _ in range(2):  # warm-up
        P.predict(path, b, **where)
    for _ in range(args.repeat):  # interleaved, so background load hits all alike
        t = time.perf_counter()
        P.predict(path, b, **where)
        e2e.append(time.perf_counter() - t)
        t = time.perf_counter()
        featurize(path, batch_size=b)
        feat.append(time.perf_counter() - t)
        t = time.perf_counter()
        pred.predict_graphs([graph], [setting])
        ens.append(time.perf_counter() - t)
    res = {"model": path, "batch_size": b, "nodes": graph.num_nodes,
           "predictor": first.model_version, "seeds": len(pred.manifest.network.seeds) if pred.manifest.network else 1,
           "cpu": sorted(os.sched_getaffinity(0)), "load_avg": os.getloadavg()[0],
           "cold_ms": 1e3 * cold, "e2e": ms(e2e), "featurize": ms(feat), "ensemble": ms(ens)}
    res["ratio_e2e_featurize"] = res["e2e"]["median"] / res["featurize"]["median"]
    res["pass"] = res["e2e"]["median"] <= TARGET_MS
    print(f"ResNet-101 ({graph.num_nodes} nodes) batch {b}, predictor {first.model_version} "
          f"({res['seeds']} seeds), CPU {res['cpu']}, load avg {res['load_avg']:.1f}")
    print(f"{'stage':<12}{'median ms':>10}{'p90 ms':>10}{'min ms':>10}")
    for k in ("e2e", "featurize", "ensemble"):
        print(f"{k:<12}{res[k]['median']:>10.1f}{res[k]['p90']:>10.1f}{res[k]['min']:>10.1f}")
    print(f"cold (predictor load + first call): {res['cold_ms']:.0f} ms")
    print(f"e2e / featurize = {res['ratio_e2e_featurize']:.2f}x")
    print(f"target e2e <= {TARGET_MS:.0f} ms: {'PASS' if res['pass'] else 'FAIL'}")
    if os.getloadavg()[0] > len(os.sched_getaffinity(0)) / 2 + 0.5:
        print("note: the machine is loaded; compare runs from the same conditions")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
