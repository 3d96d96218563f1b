"""Two kernels that saturate one part of a GPU each, run back to back for a power reading.

    python kernels.py mm 25     bf16 8192 x 8192 matmuls (compute-bound): prints TFLOP/s
    python kernels.py copy 20   4 GiB device-to-device copies (memory-bound): prints TB/s moved
"""
import sys
import time

import torch

kind, secs = sys.argv[1], float(sys.argv[2])
d = torch.device("cuda")
if kind == "mm":
    a = torch.randn(8192, 8192, device=d, dtype=torch.bfloat16)
    b = torch.randn_like(a)
    f, work = (lambda: a @ b), 2 * 8192**3  # FLOP per call
else:
    a = torch.empty(2**30, device=d, dtype=torch.float32)
    b = torch.empty_like(a)
    f, work = (lambda: b.copy_(a)), 8 * 2**30  # bytes read + written per call
for _ in range(5):
    f()
torch.cuda.synchronize()
t0, n = time.time(), 0
while time.time() - t0 < secs:
    for _ in range(20):
        f()
    torch.cuda.synchronize()
    n += 20
dt = time.time() - t0
print(f"{kind} {time.strftime('%H:%M:%S', time.gmtime(t0))} {time.strftime('%H:%M:%S')} {n} iters {n * work / dt / 1e12:.1f} T/s")
