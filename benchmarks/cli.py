"""Wall time and peak memory of one `trappm-ray predict FILE` process, against `import onnx`.

    .venv/bin/python benchmarks/cli.py [--repeat 5] [--onnx PATH] [--json PATH]

Each command runs as a fresh process (what a user's shell pays: interpreter start, imports,
predictor load, featurize, the answer), `--repeat` times, interleaved so that background load hits
all alike; the table gives the median wall time and the peak RSS (`wait4`'s ru_maxrss) and their
ratios to the baseline of the same run, `python -c "import onnx"` (the floor of any ONNX-reading
tool). Commands: a shipped GNN device (rtx3090), a spec-table GPU no labels cover (h100), the CPU
default predictor, and an argument error (answered before any heavy import).
Targets: a prediction <= 1.5 s wall and <= 400 MB RSS.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S, TARGET_MB = 1.5, 400


def run(cmd: list[str]) -> tuple[float, float, int]:
    """(wall s, peak RSS MB, exit code) of one process."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t, usage.ru_maxrss / 1024, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--onnx", default="data/sample/onnx/resnet10t@64.onnx")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    cli = [str(Path(sys.executable).with_name("trappm-ray")), "predict", args.onnx, "--batch-size", "32"]
    commands = {"import onnx (baseline)": [sys.executable, "-c", "import onnx"],
                "predict --device rtx3090 (GNN)": cli + ["--device", "rtx3090"],
                "predict --device h100 (spec)": cli + ["--device", "h100"],
                "predict (CPU default)": cli,
                "predict --batch-size 0 (error)": cli[:-2] + ["--batch-size", "0"]}
    runs: dict[str, list] = {k: [] for k in commands}
    for _ in range(args.repeat):
        for name, cmd in commands.items():
            runs[name].append(run(cmd))
    base = statistics.median(r[0] for r in runs["import onnx (baseline)"])
    base_mb = statistics.median(r[1] for r in runs["import onnx (baseline)"])
    res = {}
    print(f"{'command':<34}{'wall s':>8}{'x base':>8}{'RSS MB':>8}{'x base':>8}  exit  target")
    for name, rs in runs.items():
        wall, mb = statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs)
        ok = "" if "baseline" in name else ("PASS" if wall <= TARGET_S and mb <= TARGET_MB else "FAIL")
        res[name] = {"wall_s": wall, "rss_mb": mb, "exit": sorted({r[2] for r in rs}), "wall_x": wall / base,
                     "rss_x": mb / base_mb, "pass": ok}
        print(f"{name:<34}{wall:>8.2f}{wall / base:>8.1f}{mb:>8.0f}{mb / base_mb:>8.1f}  {res[name]['exit']}  {ok}")
    print(f"load avg {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; targets: <= {TARGET_S} s, <= {TARGET_MB} MB")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
