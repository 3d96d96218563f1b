"""Censored check of the CUDA training-memory model on timm's public RTX 3090 training rows.

timm's ``benchmark.py`` starts training at batch 512 and, on out-of-memory, steps the batch down
(512, 384, 256, 192, 128, ...): each row's batch fitted in 24 GB and, where the batch is below
512, the next larger size in that sequence did not. This job exports the needed timm models as
weight-stripped ONNX skeletons (dynamic batch, the row's resolution) into a scratch folder, then
predicts ``device_used`` at both sizes and reports the share of rows on each side.

Two stages (both resumable; the export runs one model at a time in a child process):
    python jobs/memory_check.py export --out /tmp/memcheck --sample 320     # background, slow
    python jobs/memory_check.py check --out /tmp/memcheck --json docs/memory_check.json

The check also reads skeletons from other folders of ``<arch>@<res>.onnx`` files, e.g. the GPU
corpus build's exports (the same weight-stripped, dynamic-batch graphs), so all rows need no
separate export:
    python jobs/memory_check.py check --out /tmp/memcheck --onnx-dirs artifacts/corpus-gpu/onnx \
        --json docs/memory_check.json
"""
from __future__ import annotations

import argparse
import csv
import glob
import json
import logging
import os
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from trappm_ray.corpus import zoo
from trappm_ray.physics.censored import censored_check, load_skeletons

TIMM_DIR = "/work/shared/data/public-gpu/timm"
ROWS_GLOB = "benchmark-train-amp-*-rtx3090.csv"
log = logging.getLogger("memory_check")


def read_rows(timm_dir: str = TIMM_DIR) -> list[dict]:
    """Every training row of the RTX 3090 files, with its source file name."""
    rows = []
    for path in sorted(glob.glob(os.path.join(timm_dir, ROWS_GLOB))):
        with open(path) as f:
            for r in csv.DictReader(f):
                rows.append({"model": r["model"], "family": zoo.family_of(r["model"]),
                             "batch_size": int(r["train_batch_size"]),
                             "img_size": int(r["train_img_size"]),
                             "step_ms": float(r["train_step_time"]),
                             "param_count_m": float(r["param_count"] or "nan"),
                             "source": os.path.basename(path)})
    return rows


def pick_models(rows: list[dict], sample: int, seed: int = 0) -> list[tuple[str, int]]:
    """(model, resolution) pairs, stratified by family: round-robin over shuffled families."""
    keys = sorted({(r["model"], r["img_size"]) for r in rows})
    by_fam: dict[str, list] = {}
    for k in keys:
        by_fam.setdefault(zoo.family_of(k[0]), []).append(k)
    rng = random.Random(seed)
    for v in by_fam.values():
        rng.shuffle(v)
    picked, fams = [], sorted(by_fam)
    while len(picked) < min(sample, len(keys)):
        for fam in fams:
            if by_fam[fam] and len(picked) < sample:
                picked.append(by_fam[fam].pop())
    return picked


def _export_one(arch: str, res: int, path: str) -> dict:
    """Child-process body: export one skeleton (a crash here cannot kill the driver)."""
    t0 = time.perf_counter()
    try:
        sk = zoo.export_skeleton(arch, res)
    except Exception as e:  # noqa: BLE001 - an export failure is a result
        return {"arch": arch, "res": res, "status": "error",
                "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}",
                "s": time.perf_counter() - t0}
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(sk.onnx_bytes)
    os.replace(tmp, path)
    return {"arch": arch, "res": res, "status": "ok", "params": sk.params,
            "s": time.perf_counter() - t0}


def export(out: str, sample: int, timeout_s: float = 600.0) -> None:
    """Export the sampled models into ``out/onnx``; ``out/export.jsonl`` logs each attempt."""
    os.makedirs(os.path.join(out, "onnx"), exist_ok=True)
    status_path = os.path.join(out, "export.jsonl")
    done = set()
    if os.path.exists(status_path):
        with open(status_path) as f:
            done = {(d["arch"], d["res"]) for d in map(json.loads, f)}
    todo = [k for k in pick_models(read_rows(), sample) if k not in done]
    print(f"{len(todo)} to export ({len(done)} done)", flush=True)
    pool = ProcessPoolExecutor(max_workers=1, max_tasks_per_child=10)
    for arch, res in todo:
        path = os.path.join(out, "onnx", f"{arch}@{res}.onnx")
        fut = pool.submit(_export_one, arch, res, path)
        try:
            entry = fut.result(timeout=timeout_s)
        except FutureTimeout:
            entry = {"arch": arch, "res": res, "status": "error", "error": "timeout"}
            pool.shutdown(wait=False, cancel_futures=True)
            for p in list(getattr(pool, "_processes", {}).values()):
                p.kill()  # only the child this job started
            pool = ProcessPoolExecutor(max_workers=1, max_tasks_per_child=10)
        except Exception as e:  # noqa: BLE001 - a dead child (OOM, segfault) is a result
            entry = {"arch": arch, "res": res, "status": "error", "error": repr(e)[:200]}
            pool = ProcessPoolExecutor(max_workers=1, max_tasks_per_child=10)
        with open(status_path, "a") as f:
            f.write(json.dumps(entry) + "\n")
        print(json.dumps(entry), flush=True)
    pool.shutdown()


def check(out: str, json_out: str | None, capacity_gib: float, onnx_dirs: tuple[str, ...] = ()) -> dict:
    """Run the censored check on every row whose graph was exported (to ``out/onnx`` or one of
    ``onnx_dirs``, the first folder holding a model wins); print and return figures."""
    rows = read_rows()
    skeletons = {}
    for folder in (os.path.join(out, "onnx"), *onnx_dirs):
        skeletons = {**load_skeletons(folder), **skeletons}
    result = censored_check(rows, skeletons, capacity_bytes=capacity_gib * 2**30,
                            cache_path=os.path.join(out, "predictions.jsonl"))
    summary = result["summary"]
    print(json.dumps(summary, indent=1))
    if json_out:
        with open(json_out, "w") as f:
            json.dump(result, f, indent=1)
    return result


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("stage", choices=["export", "check"])
    p.add_argument("--out", default="/tmp/memcheck")
    p.add_argument("--sample", type=int, default=150, help="models to export (stratified)")
    p.add_argument("--json", default=None, help="write the full result here (check)")
    p.add_argument("--capacity-gib", type=float, default=24.0, help="GPU memory (RTX 3090: 24)")
    p.add_argument("--onnx-dirs", default="", help="comma-separated extra skeleton folders (check)")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    if a.stage == "export":
        export(a.out, a.sample)
    else:
        check(a.out, a.json, a.capacity_gib, tuple(d for d in a.onnx_dirs.split(",") if d))


if __name__ == "__main__":
    main()
