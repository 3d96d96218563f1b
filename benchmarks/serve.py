"""Serve throughput and latency at fixed concurrency, and Serve's overhead over a direct call.

    .venv/bin/python benchmarks/serve.py [--requests 300] [--concurrency 8]
        [--replicas 1 | --autoscale] [--predictor URI | --random] [--onnx PATH] [--json PATH]

Starts a private Ray cluster on 127.0.0.1 and the app of trappm_ray.serving.app with the result
cache off (every request is computed), then a bounded local load generator: ``--requests``
POSTs of the same ONNX file (ResNet-101, batch 32 by default), ``--concurrency`` threads, each
sending its next request when the previous one answered (closed loop: no queue builds up
beyond the concurrency). Baseline in the same run: the direct in-process call
``predict_many`` on the same bytes, one at a time; overhead = Serve at concurrency 1 minus direct
(medians). Targets: >= 30 req/s with p99 <= 250 ms and 0 errors at the given concurrency.

``--replicas N`` pins the replica count. ``--autoscale`` deploys with the autoscaling settings of
serve_configs/predict.yaml instead and starts from its minimum: a ramp phase keeps the load on
until the autoscaler has added a replica (its time is reported), then the measured phase runs.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import socket
import statistics
import time
from dataclasses import asdict
from pathlib import Path

from bench_predictor import add_common_args, bench_predictor, resnet101



def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return 1e3 * s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def load(url: str, body: bytes, requests: int, concurrency: int) -> dict:
    """``requests`` POSTs from ``concurrency`` closed-loop threads; latencies and errors."""
    import httpx

    headers = {"Content-Type": "application/octet-stream"}
    latencies: list[float] = []
    failed: list[int] = []  # list appends are atomic under the GIL; `+=` on an int is not
    counter = iter(range(requests))

    def worker() -> None:
        with httpx.Client(timeout=60) as client:
            for _ in counter:  # shared iterator: stops after `requests` in total
                t = time.perf_counter()
                try:
                    ok = client.post(url, content=body, headers=headers).status_code == 200
                except httpx.HTTPError:
                    ok = False
                latencies.append(time.perf_counter() - t)
                if not ok:
                    failed.append(1)

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        for f in [pool.submit(worker) for _ in range(concurrency)]:
            f.result()
    wall = time.perf_counter() - start
    return {"requests": requests, "concurrency": concurrency, "errors": len(failed),
            "rps": requests / wall, "p50_ms": pct(latencies, 0.5), "p99_ms": pct(latencies, 0.99)}


def yaml_deployment() -> dict:
    import yaml

    path = Path(__file__).resolve().parents[1] / "serve_configs" / "predict.yaml"
    return yaml.safe_load(path.read_text())["applications"][0]["deployments"][0]


def running_replicas() -> int:
    from ray import serve

    deps = serve.status().applications["bench"].deployments
    return sum(d.replica_states.get("RUNNING", 0) for d in deps.values())


def ramp_up(url: str, body: bytes, concurrency: int, timeout_s: float) -> dict:
    """Closed-loop load in rounds until the autoscaler has added a replica (or ``timeout_s``)."""
    before = running_replicas()
    start = time.perf_counter()
    rounds = []
    while running_replicas() <= before and time.perf_counter() - start < timeout_s:
        rounds.append(load(url, body, 4 * concurrency, concurrency))
    requests = sum(r["requests"] for r in rounds)
    seconds = time.perf_counter() - start
    return {"replicas_before": before, "replicas_after": running_replicas(), "seconds": seconds,
            "requests": requests, "errors": sum(r["errors"] for r in rounds),
            "rps": requests / seconds,
            "p99_ms": max((r["p99_ms"] for r in rounds), default=0.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--autoscale", action="store_true",
                    help="serve_configs/predict.yaml's autoscaling instead of --replicas")
    ap.add_argument("--ramp-timeout", type=float, default=180.0)
    ap.add_argument("--batch-size", type=int, default=32)
    add_common_args(ap)
    args = ap.parse_args()
    from trappm_ray.serving import api as P
    from trappm_ray.ray_init import ensure_ray
    from trappm_ray.serving.app import ServeSettings, TrappmPredictor

    predictor = bench_predictor(args.predictor, args.random)
    body = resnet101(Path(args.onnx)).read_bytes()

    # direct baseline, in this process, one call at a time
    pred = P.load_predictor(predictor)
    item = [(body, P.PredictOptions(args.batch_size), "<upload>")]
    P.predict_many(item, pred)
    direct = []
    for _ in range(30):
        t = time.perf_counter()
        P.predict_many(item, pred)
        direct.append(time.perf_counter() - t)

    if args.autoscale:
        autoscaling = yaml_deployment()["autoscaling_config"]
    else:
        autoscaling = {"min_replicas": args.replicas, "max_replicas": args.replicas}
    ensure_ray(num_cpus=max(2, args.replicas))
    from ray import serve

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    settings = ServeSettings.from_args({"predictor": predictor, "cache_size": 0})
    serve.run(TrappmPredictor.options(
        autoscaling_config=autoscaling,
        ray_actor_options={"num_cpus": 1}).bind(asdict(settings)), name="bench", route_prefix="/")
    url = f"http://127.0.0.1:{port}/v1/predict?batch_size={args.batch_size}"
    load(url, body, 10, 2)  # warm-up
    single = load(url, body, 30, 1)
    ramp = ramp_up(url, body, args.concurrency, args.ramp_timeout) if args.autoscale else None
    loaded = load(url, body, args.requests, args.concurrency)
    loaded["replicas_after"] = running_replicas()
    serve.shutdown()

    direct_ms = 1e3 * statistics.median(direct)
    res = {"model": args.onnx, "batch_size": args.batch_size,
           "replicas": "autoscale" if args.autoscale else args.replicas,
           "autoscaling_config": autoscaling, "ramp": ramp,
           "load_avg": os.getloadavg()[0], "direct_p50_ms": direct_ms, "serve_c1": single,
           "serve": loaded, "overhead_ms": single["p50_ms"] - direct_ms,
           "ratio_serve_c1_direct": single["p50_ms"] / direct_ms}
    res["pass"] = loaded["rps"] >= 30 and loaded["p99_ms"] <= 250 and loaded["errors"] == 0
    print(f"{Path(args.onnx).name} batch {args.batch_size}, {res['replicas']} replica(s) "
          f"{autoscaling}, load avg {res['load_avg']:.1f}")
    if ramp:
        print(f"autoscaler ramp            {ramp['replicas_before']} -> {ramp['replicas_after']} "
              f"running replicas after {ramp['seconds']:.0f} s under load "
              f"(ramp: {ramp['rps']:.1f} req/s, p99 {ramp['p99_ms']:.0f} ms, "
              f"errors {ramp['errors']}/{ramp['requests']})")
    print(f"direct call p50            {direct_ms:8.1f} ms")
    print(f"serve, concurrency 1 p50   {single['p50_ms']:8.1f} ms  "
          f"(overhead {res['overhead_ms']:.1f} ms, {res['ratio_serve_c1_direct']:.2f}x direct)")
    print(f"serve, concurrency {loaded['concurrency']:<3}     {loaded['rps']:8.1f} req/s  "
          f"p50 {loaded['p50_ms']:.1f} ms  p99 {loaded['p99_ms']:.1f} ms  "
          f"errors {loaded['errors']}/{loaded['requests']}, "
          f"{loaded['replicas_after']} replica(s) running after")
    print(f"throughput / direct rate   {loaded['rps'] * direct_ms / 1e3:8.2f}x")
    print(f"target >= 30 req/s, p99 <= 250 ms, 0 errors: {'PASS' if res['pass'] else 'FAIL'}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
