"""The Serve app and the batch job under overload, hostile uploads and faults.

    .venv/bin/python benchmarks/serve_faults.py --json faults.json
        [--seconds 60] [--kill-seconds 40] [--replicas 2] [--files 400] [--keep]
        [--scenarios load,replica-kill,driver-kill,s3-stop] [--predictor default] [--onnx PATH]

``--keep`` keeps the temp dir: Ray's logs, the jobs' logs.

Starts a private Ray cluster on 127.0.0.1 (2 CPUs, its own temp dir) and the app of
trappm_ray.serving.app with ``--replicas`` replicas, 1 CPU each, result cache off. Benign requests
POST the ResNet-101 skeleton (as benchmarks/serve.py); hostile ones are benchmarks/hostile_models.py
(the shape-arithmetic bombs, Loop, If nested 60 deep, corrupt and random bytes, a cycle, an
external-data escape, 200,001 nodes, ...). Scenarios, in this order:

* capacity (always, when a Serve scenario runs): benign closed-loop load at concurrency 1, 2, 4,
  8, 16 for ``--capacity-seconds`` each; capacity = the best rate. The overload concurrency is
  twice the smallest concurrency that reached 95% of it: twice the requests in flight that
  saturate the service (with no queueing, those clients would offer concurrency / latency at
  concurrency 1, reported as ``offered_2x_rps``).
* ``load``: ``--seconds`` of closed-loop load at that concurrency, every fifth request hostile.
  Pass: 0 5xx, 0 connection errors, every hostile request a 4xx (the bombs: a 4xx or a 200 with
  an out-of-distribution warning), the same replica processes running before and after, and
  the HTTP proxy not restarted.
* ``replica-kill``: the same load for ``--kill-seconds``; a third of the way in, one replica's
  worker process gets SIGKILL. Reported: failed requests (5xx or no answer), time from the kill to
  the last failure, to the first success, and until Serve runs a new replica.
* ``driver-kill``: jobs/batch_predict.py over ``--files`` local files (every fifth hostile) as a
  driver joined to the cluster; SIGKILL once it has written 2 parquet parts, then the same command
  again. Pass: exactly one row per input file.
* ``s3-stop``: the same job between a private radosgw's buckets (scripts/s3_server.sh in the temp
  dir, free ports); the gateway gets SIGKILL once 2 parts are written. Pass: the job exits
  non-zero with a one-line ``BatchStopped`` error within a minute; after the gateway is back the
  re-run exits 0 with exactly one row per input file, none of them a ``read_error``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import asdict
from pathlib import Path

import fault_scenarios as FS
from bench_predictor import add_common_args, bench_predictor, resnet101
from hostile_models import hostile_bodies

SERVE_SCENARIOS = ("load", "replica-kill")
ALL = ("load", "replica-kill", "driver-kill", "s3-stop")


def start_serve(predictor: str, replicas: int) -> tuple[str, str]:
    """The app with a fixed replica count on a free port; its predict URL and app name."""
    from ray import serve

    from trappm_ray.serving.app import ServeSettings, TrappmPredictor

    port = FS.free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    settings = ServeSettings.from_args({"predictor": predictor, "cache_size": 0})
    serve.run(TrappmPredictor.options(
        autoscaling_config={"min_replicas": replicas, "max_replicas": replicas},
        ray_actor_options={"num_cpus": 1}).bind(asdict(settings)), name="faults", route_prefix="/")
    return f"http://127.0.0.1:{port}/v1/predict?batch_size=32", "faults"


def overload(url: str, app: str, benign: bytes, hostile: list, seconds: float, c: int) -> dict:
    pids, proxies = FS.replica_pids(app), FS.replica_pids("", "SERVE_PROXY_ACTOR")
    out = FS.summarize(FS.closed_loop(url, benign, hostile, seconds, c))
    after = FS.replica_pids(app)
    out.update(concurrency=c, replicas_before=len(pids), replicas_after=FS.running_replicas(app),
               same_replica_processes=sorted(pids.values()) == sorted(after.values()),
               proxy_restarted=FS.replica_pids("", "SERVE_PROXY_ACTOR") != proxies)
    out["pass"] = (out["5xx"] == 0 and out["connection_errors"] == 0
                   and not out["hostile_unexpected"] and out["same_replica_processes"]
                   and not out["proxy_restarted"])
    return out


def batch_driver_kill(tmp: Path, predictor: str, benign: bytes, hostile: list, n: int,
                      address: str) -> dict:
    from trappm_ray import storage

    src, dst = str(tmp / "batch-in"), str(tmp / "batch-out")
    inputs = FS.write_inputs(storage.write_bytes, src, benign, hostile, n)
    t0 = time.perf_counter()
    proc = FS.start_batch(src, dst, predictor, tmp / "driver-kill-1.log", ray_address=address)
    waited = FS.wait_for(lambda: len(FS.parts(dst)) >= 2 or proc.poll() is not None, 600, 0.1)
    proc.kill()  # the driver process only: SIGKILL, as the OOM killer or a lost node would
    proc.wait()
    killed_at = time.perf_counter() - t0
    after_kill = FS.row_counts(dst, inputs)
    t1 = time.perf_counter()
    rerun = FS.start_batch(src, dst, predictor, tmp / "driver-kill-2.log", ray_address=address)
    rc = rerun.wait(timeout=900)
    final = FS.row_counts(dst, inputs)
    return {"files": n, "killed_after_s": killed_at, "parts_seen": waited is not None,
            "after_kill": _brief(after_kill), "rerun_rc": rc,
            "rerun_s": time.perf_counter() - t1, "final": _brief(final),
            "pass": rc == 0 and final["rows"] == n and not final["duplicated"]
            and not final["missing"]}


def batch_s3_stop(tmp: Path, s3: FS.S3Server, predictor: str, benign: bytes, hostile: list,
                  n: int, address: str | None, env: dict | None = None) -> dict:
    from trappm_ray import storage

    prefix = f"s3://{os.environ.get('TRAPPM_S3_BUCKET', 'trappm')}/faults-{uuid.uuid4().hex[:8]}"
    src, dst = f"{prefix}/in", f"{prefix}/out"
    inputs = FS.write_inputs(storage.write_bytes, src, benign, hostile, n)
    proc = FS.start_batch(src, dst, predictor, tmp / "s3-stop-1.log", env=env, ray_address=address)
    FS.wait_for(lambda: len(FS.parts(dst)) >= 2 or proc.poll() is not None, 600, 0.2)
    s3.stop_gateway()
    t_stop = time.perf_counter()
    try:
        rc = proc.wait(timeout=300)
    except Exception:  # noqa: BLE001 - still running after 5 minutes: a hang, reported
        rc = None
    failed_after = time.perf_counter() - t_stop
    FS.end_group(proc)
    error = FS.last_line(tmp / "s3-stop-1.log")
    back = s3.start_gateway()
    after_stop = FS.row_counts(dst, inputs)
    rerun = FS.start_batch(src, dst, predictor, tmp / "s3-stop-2.log", env=env, ray_address=address)
    rc2 = rerun.wait(timeout=900)
    FS.end_group(rerun)
    final = FS.row_counts(dst, inputs)
    return {"files": n, "job_rc": rc, "failed_after_stop_s": failed_after, "error": error,
            "gateway_back_s": back, "after_stop": _brief(after_stop), "rerun_rc": rc2,
            "final": _brief(final),
            "pass": rc not in (0, None) and "BatchStopped" in error and rc2 == 0
            and final["rows"] == n and not final["duplicated"] and not final["missing"]
            and "read_error" not in final["error_codes"]}


def _brief(counts: dict) -> dict:
    return {**counts, "duplicated": len(counts["duplicated"]), "missing": len(counts["missing"]),
            "unknown": len(counts["unknown"])}


def report(res: dict) -> None:
    cap = res.get("capacity")
    if cap:
        curve = ", ".join(f"c{c}: {v['rps']:.1f}" for c, v in cap["curve"].items())
        print(f"capacity      {cap['capacity_rps']:.1f} req/s ({curve}); saturated at c"
              f"{cap['saturating_concurrency']} -> overload concurrency {cap['concurrency_2x']} "
              f"(would offer {cap['offered_2x_rps']:.0f} req/s at the c1 latency "
              f"{cap['latency_c1_ms']:.0f} ms)")
    for key in ("load", "replica_kill"):
        s = res.get(key)
        if not s:
            continue
        s = s if key == "load" else {**s["summary"], **s}
        print(f"{key:13s} {s['requests']} requests in {s['seconds']:.0f} s ({s['rps']:.1f} req/s): "
              f"2xx {s['2xx']}, 4xx {s['4xx']}, 5xx {s['5xx']}, no answer "
              f"{s['connection_errors']}; hostile {s['hostile']}: 4xx {s['hostile_4xx']}, "
              f"unexpected {len(s['hostile_unexpected'])}; "
              f"benign p50 {s['p50_ms']:.0f} ms, p99 {s['p99_ms']:.0f} ms")
    if res.get("load"):
        s = res["load"]
        print(f"              replicas {s['replicas_before']} -> {s['replicas_after']}, same "
              f"processes: {s['same_replica_processes']}, proxy restarted: "
              f"{s['proxy_restarted']}; PASS: {s['pass']}")
    if res.get("replica_kill"):
        k = res["replica_kill"]

        def fmt(v: float | None) -> str:
            return "-" if v is None else f"{v:.1f} s"

        print(f"              killed pid {k['killed_pid']}: {k['failed']} failed "
              f"{k['failed_statuses']}, last failure {fmt(k['last_failure_s'])}, first success "
              f"{fmt(k['first_success_s'])}, new replica running {fmt(k['replicas_back_s'])} "
              f"after the kill; replicas {k['replicas_before']} -> {k['replicas_after']}, proxy "
              f"restarted: {k['proxy_restarted']}")
    if res.get("driver_kill"):
        d = res["driver_kill"]
        print(f"driver-kill   {d['files']} files; driver killed at {d['killed_after_s']:.0f} s with "
              f"{d['after_kill']['rows']} rows in {d['after_kill']['parts']} parts; re-run rc "
              f"{d['rerun_rc']} in {d['rerun_s']:.0f} s -> {d['final']['rows']} rows, duplicated "
              f"{d['final']['duplicated']}, missing {d['final']['missing']}; PASS: {d['pass']}")
    if res.get("s3_stop"):
        d = res["s3_stop"]
        print(f"s3-stop       {d['files']} files; gateway killed with {d['after_stop']['rows']} rows "
              f"written; job exit {d['job_rc']} {d['failed_after_stop_s']:.0f} s later: "
              f"{d['error'][:400]}")
        print(f"              gateway back in {d['gateway_back_s']:.1f} s; re-run rc {d['rerun_rc']}"
              f" -> {d['final']['rows']} rows, duplicated {d['final']['duplicated']}, missing "
              f"{d['final']['missing']}, codes {d['final']['error_codes']}; PASS: {d['pass']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default=",".join(ALL))
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--kill-seconds", type=float, default=40.0)
    ap.add_argument("--capacity-seconds", type=float, default=8.0)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (Ray's logs, job logs)")
    add_common_args(ap)
    args = ap.parse_args()
    scenarios = [s for s in args.scenarios.split(",") if s]
    assert set(scenarios) <= set(ALL), f"scenarios: {ALL}"
    predictor = bench_predictor(args.predictor, args.random)
    benign = resnet101(Path(args.onnx)).read_bytes()
    hostile = hostile_bodies()
    tmp = Path(tempfile.mkdtemp(prefix="tf-", dir="/tmp"))  # short: Ray's socket paths
    res: dict = {"scenarios": scenarios, "model": args.onnx, "replicas": args.replicas,
                 "load_avg_start": os.getloadavg()[0], "hostile_cases": [h[0] for h in hostile]}
    s3 = FS.S3Server(str(tmp / "s3")) if "s3-stop" in scenarios else None
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray

    try:
        if s3:  # before Ray starts: its workers inherit the endpoint and credentials
            os.environ.update(s3.start())
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _node_ip_address="127.0.0.1", _temp_dir=str(tmp / "ray"))
        address = ray.get_runtime_context().gcs_address
        if set(scenarios) & set(SERVE_SCENARIOS):
            from ray import serve

            url, app = start_serve(predictor, args.replicas)
            FS.closed_loop(url, benign, [], 3, 2)  # warm-up
            res["capacity"] = FS.capacity(url, benign, args.capacity_seconds, (1, 2, 4, 8, 16))
            c = res["capacity"]["concurrency_2x"]
            if "load" in scenarios:
                res["load"] = overload(url, app, benign, hostile, args.seconds, c)
            if "replica-kill" in scenarios:
                res["replica_kill"] = FS.kill_replica_under_load(
                    url, app, benign, hostile, args.kill_seconds, c, args.kill_seconds / 3)
            serve.shutdown()  # frees the CPUs for the batch actors
        batch_hostile = hostile_bodies(include_big=False)
        if "driver-kill" in scenarios:
            res["driver_kill"] = batch_driver_kill(tmp, predictor, benign, batch_hostile,
                                                   args.files, address)
        if "s3-stop" in scenarios:
            res["s3_stop"] = batch_s3_stop(tmp, s3, predictor, benign, batch_hostile,
                                           args.files, address)
    finally:
        ray.shutdown()
        if s3:
            s3.stop()
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    res["load_avg_end"] = os.getloadavg()[0]
    print(f"{Path(args.onnx).name} batch 32, {args.replicas} replicas, 20% hostile "
          f"({len(hostile)} cases), load avg {res['load_avg_start']:.1f} -> {res['load_avg_end']:.1f}")
    report(res)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
