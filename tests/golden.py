"""The answers every shipped predictor gives on the sample models, pinned (tests/data/golden_answers.json).

    .venv/bin/python tests/golden.py      rewrite the file (a change of numbers is its own commit,
                                          which says why the answers moved)
"""
from __future__ import annotations

import glob
import json
import os

import trappm_ray

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tests", "data", "golden_answers.json")
SAMPLES = sorted(glob.glob(os.path.join(ROOT, "data", "sample", "onnx", "*.onnx")))
BATCHES = (1, 32, 256)
# every shipped predictor (None: the default CPU one), two spec-table GPUs, a user's spec file
DEVICES = (None, "rtx3090", "rtx4090", "i9-10940x", "h100-sxm5-80gb", "t4", "spec:data/sample/my_gpu.json")
PINNED = ("train_step_ms", "train_memory_mb", "inference_ms", "train_power_w", "interval", "floors",
          "max_batch_size", "smallest_profile", "model_version")


def answer(path: str, batch: int, device: str | None) -> dict:
    """The pinned part of one prediction (or the error it raises)."""
    where = ({"device_spec": os.path.join(ROOT, device.split(":", 1)[1])} if device and device.startswith("spec:")
             else {"device": device})
    try:
        d = trappm_ray.predict(path, batch_size=batch, **where).to_dict()
    except Exception as e:  # noqa: BLE001 - a refusal is an answer too
        return {"error": type(e).__name__}
    return {k: d.get(k) for k in PINNED}


def answers() -> dict[str, dict]:
    return {f"{device}|{os.path.basename(p)}|{b}": answer(p, b, device)
            for device in DEVICES for p in SAMPLES for b in BATCHES}


if __name__ == "__main__":
    os.chdir(ROOT)
    with open(GOLDEN, "w") as fh:
        json.dump(answers(), fh, indent=0, sort_keys=True)
        fh.write("\n")
    print(f"wrote {GOLDEN}")
