"""The fault scenarios of benchmarks/serve_faults.py, shared with tests/serving/test_faults.py.

Serve side: a closed-loop HTTP load generator that mixes hostile uploads into benign ones and
records every answer (:func:`closed_loop`, :func:`summarize`), the capacity measurement
(:func:`capacity`), and the replica helpers (:func:`replica_pids`, :func:`running_replicas`).
Batch side: jobs/batch_predict.py run as a separate driver process (:func:`start_batch`), the
rows-per-input count (:func:`row_counts`), and a private radosgw S3 server whose gateway can be
stopped and started again while its data stays in the OSD (:class:`S3Server`).
"""
from __future__ import annotations

import concurrent.futures
import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OCTET = {"Content-Type": "application/octet-stream"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct_ms(values: list[float], q: float) -> float:
    s = sorted(values)
    return 1e3 * s[min(len(s) - 1, int(round(q * (len(s) - 1))))] if s else float("nan")


# ------------------------------------------------------------------------------------------
# HTTP load
# ------------------------------------------------------------------------------------------
@dataclass
class Answer:
    """One request: what was sent (``kind``: ``benign`` or a hostile case), when, and the HTTP
    status (0: no answer, a connection error or timeout)."""

    kind: str
    expect: str
    t0: float
    t1: float
    status: int
    error: str = ""


def closed_loop(url: str, benign: bytes, hostile: list[tuple[str, bytes, str]], seconds: float,
                concurrency: int, hostile_every: int = 5, timeout_s: float = 60.0) -> list[Answer]:
    """``concurrency`` threads, each sending its next POST when the previous one answered, for
    ``seconds``. Every ``hostile_every``-th request (20% at 5) is the next hostile case in turn."""
    import httpx

    answers: list[Answer] = []  # list.append is atomic under the GIL
    counter = itertools.count()
    deadline = time.perf_counter() + seconds

    def worker() -> None:
        with httpx.Client(timeout=timeout_s) as client:
            while time.perf_counter() < deadline:
                i = next(counter)
                kind, body, expect = ("benign", benign, "2xx") if not hostile or \
                    i % hostile_every != hostile_every - 1 else hostile[(i // hostile_every)
                                                                        % len(hostile)]
                t0 = time.perf_counter()
                try:
                    r = client.post(url, content=body, headers=OCTET)
                    answers.append(Answer(kind, expect, t0, time.perf_counter(), r.status_code,
                                          r.text[:200] if r.status_code >= 500 else ""))
                except httpx.HTTPError as e:
                    answers.append(Answer(kind, expect, t0, time.perf_counter(), 0,
                                          f"{e.__class__.__name__}: {e}"[:200]))
                    # as a client would back off: a refused connect returns at once, and
                    # spinning on it would take the CPU from the service that is recovering
                    time.sleep(0.1)

    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        for f in [pool.submit(worker) for _ in range(concurrency)]:
            f.result()
    return answers


def summarize(answers: list[Answer]) -> dict:
    """Counts by status class, rate, latency of benign answers, and the hostile outcomes."""
    if not answers:
        return {"requests": 0}
    start, end = min(a.t0 for a in answers), max(a.t1 for a in answers)
    hostile = [a for a in answers if a.kind != "benign"]
    benign = [a.t1 - a.t0 for a in answers if a.kind == "benign" and a.status == 200]
    by_kind: dict[str, Counter] = {}
    for a in hostile:
        by_kind.setdefault(a.kind, Counter())[str(a.status)] += 1
    return {
        "requests": len(answers), "seconds": end - start, "rps": len(answers) / (end - start),
        "2xx": sum(200 <= a.status < 300 for a in answers),
        "4xx": sum(400 <= a.status < 500 for a in answers),
        "5xx": sum(a.status >= 500 for a in answers),
        "connection_errors": sum(a.status == 0 for a in answers),
        "benign": len(answers) - len(hostile), "benign_ok": len(benign),
        "hostile": len(hostile), "hostile_4xx": sum(400 <= a.status < 500 for a in hostile),
        "hostile_unexpected": [(a.kind, a.status) for a in hostile if not 400 <= a.status < 500],
        "hostile_by_kind": {k: dict(v) for k, v in sorted(by_kind.items())},
        "p50_ms": pct_ms(benign, 0.5), "p99_ms": pct_ms(benign, 0.99),
        "errors_5xx_sample": sorted({a.error for a in answers if a.status >= 500 or
                                     a.status == 0})[:5],
    }


def capacity(url: str, body: bytes, seconds: float, levels=(1, 2, 4, 8)) -> dict:
    """Benign closed-loop throughput at each concurrency. Capacity is the best rate; the
    overload concurrency is twice the smallest one that reached 95% of it (twice the requests
    in flight that saturate the service). ``offered_2x_rps``: what that many clients would send
    if nothing queued (concurrency / latency at concurrency 1, Little's law)."""
    curve = {}
    for c in levels:
        s = summarize(closed_loop(url, body, [], seconds, c))
        curve[c] = {"rps": s["rps"], "p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"],
                    "failed": s["requests"] - s["benign_ok"]}
    best = max(v["rps"] for v in curve.values())
    saturating = min(c for c, v in curve.items() if v["rps"] >= 0.95 * best)
    latency_s = curve[levels[0]]["p50_ms"] / 1e3 / levels[0]
    return {"curve": curve, "capacity_rps": best, "latency_c1_ms": 1e3 * latency_s,
            "saturating_concurrency": saturating, "concurrency_2x": 2 * saturating,
            "offered_2x_rps": 2 * saturating / latency_s}


# ------------------------------------------------------------------------------------------
# Serve replicas
# ------------------------------------------------------------------------------------------
def replica_pids(app: str, prefix: str = "SERVE_REPLICA::") -> dict[str, int]:
    """Process id of every replica actor of application ``app`` (named actors in the ``serve``
    namespace; asked through the actor itself, so no dashboard is needed). With ``prefix``
    ``SERVE_PROXY_ACTOR`` and ``app`` empty: the HTTP proxies'."""
    import ray

    out = {}
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["name"].startswith(f"{prefix}{app}#" if app else prefix):
            try:
                actor = ray.get_actor(entry["name"], namespace=entry["namespace"])
                out[entry["name"]] = ray.get(actor.__ray_call__.remote(lambda self: os.getpid()),
                                             timeout=30)
            except Exception:  # noqa: BLE001 - a replica that is going away has no pid to give
                continue
    return out


def running_replicas(app: str) -> int:
    from ray import serve

    deps = serve.status().applications[app].deployments
    return sum(d.replica_states.get("RUNNING", 0) for d in deps.values())


def kill_replica_under_load(url: str, app: str, benign: bytes, hostile: list, seconds: float,
                            concurrency: int, kill_at: float, recover_timeout: float = 120) -> dict:
    """Load for ``seconds``; at ``kill_at`` one replica's worker process gets SIGKILL. Failed
    requests (5xx or no answer), and the times from the kill to the last failure, to the first
    success sent after it, and to the replica count being back to what it was."""
    before = running_replicas(app)
    pids = replica_pids(app)
    proxies = replica_pids("", "SERVE_PROXY_ACTOR")
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(
        answers=closed_loop(url, benign, hostile, seconds, concurrency)))
    thread.start()
    time.sleep(kill_at)
    name, pid = sorted(pids.items())[0]
    t_kill = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    back_s = None
    while time.perf_counter() - t_kill < recover_timeout:
        time.sleep(0.25)
        if running_replicas(app) >= before and set(replica_pids(app).values()) - set(pids.values()):
            back_s = time.perf_counter() - t_kill
            break
    thread.join()
    # the controller may report the killed replica as running for a moment and replace it only
    # after: the count after the run is read once it is back, within the recovery timeout
    while running_replicas(app) < before and time.perf_counter() - t_kill < recover_timeout:
        time.sleep(0.25)
    answers = result["answers"]
    failed = [a for a in answers if a.status >= 500 or a.status == 0]
    after = [a for a in answers if a.t0 > t_kill and a.status == 200]
    # a hostile request the kill made fail is counted in `failed`; any other answer must be a 4xx
    hostile_bad = [a for a in answers if a.kind != "benign" and 0 < a.status < 400]
    return {"replicas_before": before, "killed_pid": pid, "killed": name,
            "summary": summarize(answers), "failed": len(failed),
            "failed_statuses": dict(Counter(a.status for a in failed)),
            "failed_errors": sorted({a.error for a in failed})[:5],
            "last_failure_s": max((a.t1 - t_kill for a in failed), default=None),
            "first_success_s": min((a.t1 - t_kill for a in after), default=None),
            "replicas_back_s": back_s, "replicas_after": running_replicas(app),
            "proxy_restarted": replica_pids("", "SERVE_PROXY_ACTOR") != proxies,
            "hostile_unexpected": [(a.kind, a.status) for a in hostile_bad]}


# ------------------------------------------------------------------------------------------
# Batch job
# ------------------------------------------------------------------------------------------
def write_inputs(put, prefix: str, benign: bytes, hostile: list, n: int) -> list[str]:
    """``n`` model files under ``prefix`` (every fifth a hostile case), written with ``put``."""
    paths = []
    for i in range(n):
        body = hostile[(i // 5) % len(hostile)][1] if hostile and i % 5 == 4 else benign
        paths.append(f"{prefix}/m{i // 100:02d}/model{i:05d}.onnx")
        put(paths[-1], body)
    return paths


def start_batch(src: str, dst: str, predictor: str, log: Path, env: dict | None = None,
                ray_address: str | None = None, extra: tuple = ()) -> subprocess.Popen:
    """jobs/batch_predict.py as its own driver process; stdout and stderr go to ``log``. With
    ``ray_address`` it joins that cluster (as a submitted job would); without, it starts its
    own one-CPU cluster, which inherits ``env`` (how its actors find an S3 endpoint)."""
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PYTHONWARNINGS": "ignore",
           **(env or {})}
    env.pop("RAY_ADDRESS", None)
    args = [sys.executable, str(ROOT / "jobs" / "batch_predict.py"), src, dst,
            "--predictor", predictor, "--rows-per-batch", "2", "--rows-per-file", "8", *extra]
    args += ["--ray-address", ray_address] if ray_address else ["--num-cpus", "1"]
    # own session: the cleanup can end this driver's process group without touching others
    return subprocess.Popen(args, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def end_group(proc: subprocess.Popen) -> None:
    """SIGKILL what is left of the process group that :func:`start_batch` started."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def parts(dst: str) -> list[str]:
    from trappm_ray import storage

    # s3fs caches listings, and the job writes behind this process's back
    storage.fs_and_path(dst)[0].invalidate_cache()
    return storage.listdir(dst, ".parquet")


def row_counts(dst: str, inputs: list[str]) -> dict:
    """Rows per input path over every part under ``dst``: duplicates, missing, statuses."""
    from trappm_ray import storage

    rows = [r for uri in parts(dst) for r in storage.read_table(
        uri, columns=["path", "status", "error_code"]).to_pylist()]
    per_path = Counter(r["path"] for r in rows)
    return {"inputs": len(inputs), "rows": len(rows), "parts": len(parts(dst)),
            "duplicated": sorted(p for p, n in per_path.items() if n > 1),
            "missing": sorted(set(inputs) - set(per_path)),
            "unknown": sorted(set(per_path) - set(inputs)),
            "status": dict(Counter(r["status"] for r in rows)),
            "error_codes": dict(Counter(r["error_code"] for r in rows if r["error_code"]))}


def wait_for(cond, timeout: float, step: float = 0.2) -> float | None:
    """Seconds until ``cond()`` held, or None after ``timeout``."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if cond():
            return time.perf_counter() - t0
        time.sleep(step)
    return None


def last_line(log: Path) -> str:
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1] if lines else ""


class S3Server:
    """A private radosgw (scripts/s3_server.sh in its own directory and ports). The gateway can
    be stopped (SIGKILL) and started again; the objects live in the OSD, which keeps running."""

    def __init__(self, directory: str, port: int | None = None, mon_port: int | None = None):
        self.dir, self.port = directory, port or free_port()
        self.mon_port = mon_port or free_port()
        self.env_vars = {"TRAPPM_S3_PORT": str(self.port), "TRAPPM_S3_MON_PORT": str(self.mon_port)}

    def _script(self, cmd: str) -> str:
        out = subprocess.run(["bash", str(ROOT / "scripts" / "s3_server.sh"), cmd, self.dir],
                             env={**os.environ, **self.env_vars}, capture_output=True, text=True,
                             timeout=300)
        if out.returncode:
            raise RuntimeError(f"s3_server.sh {cmd}: {out.stderr.strip()[-500:]}")
        return out.stdout

    def start(self) -> dict:
        """Start the server; the AWS environment variables that reach it."""
        self._script("start")
        env = dict(line.removeprefix("export ").split("=", 1)
                   for line in self._script("env").splitlines() if line.startswith("export "))
        return env

    def answering(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def stop_gateway(self) -> int:
        """SIGKILL radosgw (only its pid from this server's own directory); its pid."""
        pid = int(Path(self.dir, "run", "client.rgw.a.pid").read_text())
        if Path(f"/proc/{pid}/comm").read_text().strip() != "radosgw":
            raise RuntimeError(f"pid {pid} is not this server's radosgw")
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not self.answering(), 10)
        return pid

    def start_gateway(self, timeout: float = 60) -> float | None:
        """Start radosgw again on the same cluster; seconds until it answers."""
        env = {**os.environ, "CEPH_CONF": str(Path(self.dir, "ceph.conf"))}
        subprocess.run(["radosgw", "-n", "client.rgw.a"], env=env, check=True, timeout=60)
        return wait_for(self.answering, timeout)

    def stop(self) -> None:
        self._script("stop")


__all__ = ["Answer", "closed_loop", "summarize", "capacity", "replica_pids",
           "running_replicas", "kill_replica_under_load", "write_inputs", "start_batch",
           "end_group", "parts", "row_counts", "wait_for", "last_line", "S3Server", "free_port",
           "pct_ms"]
