"""The measuring machine: its identity and provenance, and waiting until it is quiet."""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import importlib.metadata
import os
import re
import time


def slugify(text: str) -> str:
    """Lower-case ``text`` with every run of other characters replaced by one dash."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def device_slug(info: dict, threads: int = 1) -> str:
    """Directory/key name of a device: GPU name, or CPU model plus thread count (``...-t1``)."""
    slug = slugify(info["device_name"])
    return slug if info["device"] == "cuda" else f"{slug}-t{threads}"


def nvml_handle(pynvml, props=None):
    """NVML handle of this process's cuda:0: by PCI id when torch ``props`` are given, else from
    CUDA_VISIBLE_DEVICES (which Ray sets), so the parent never has to initialise CUDA."""
    with contextlib.suppress(Exception):
        return pynvml.nvmlDeviceGetHandleByPciBusId(
            f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0")
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    if first.startswith(("GPU-", "MIG-")):
        return pynvml.nvmlDeviceGetHandleByUUID(first)
    return pynvml.nvmlDeviceGetHandleByIndex(int(first) if first.isdigit() else 0)


def device_info(device: str = "cpu") -> dict:
    """Provenance of the measuring machine; never creates a CUDA context (it would count in NVML).

    Args:
        device: "cpu" or "cuda".
    Returns:
        device, device_name, driver, cuda, torch_version, timm_version, machine_id (a hash, not
        the hostname), boot_id (a hash of this boot's id: VMs cloned from one image share the
        machine id), logical_cpus, date (UTC ISO) and load_avg (1-minute).
    Raises:
        RuntimeError: device "cuda" on a machine without a usable NVML (no GPU driver).
    """
    info = {"device": device, "driver": "cpu", "cuda": "cpu", "logical_cpus": os.cpu_count(),
            "torch_version": importlib.metadata.version("torch"),
            "timm_version": importlib.metadata.version("timm"),
            "date": utcnow(), "load_avg": os.getloadavg()[0]}
    if device == "cuda":
        import pynvml
        import torch  # importing does not initialise CUDA; only torch.version is read

        try:
            pynvml.nvmlInit()  # NVMLError_LibraryNotFound without a driver
            name = pynvml.nvmlDeviceGetName(nvml_handle(pynvml))
            info.update(device_name=name.decode() if isinstance(name, bytes) else name,
                        driver=str(pynvml.nvmlSystemGetDriverVersion()), cuda=str(torch.version.cuda))
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as exc:
            raise RuntimeError(f"device='cuda' but NVML is unusable here: {exc!r}") from exc
    else:
        names = [ln.split(":", 1)[1].strip() for ln in read_text("/proc/cpuinfo").splitlines()
                 if ln.startswith("model name")]
        info["device_name"] = names[0] if names else os.uname().machine
    ident = read_text("/etc/machine-id").strip() or os.uname().nodename  # hashed: no hostname stored
    info["machine_id"] = hashlib.sha256(ident.encode()).hexdigest()[:12]
    # VMs cloned from one image share /etc/machine-id; the boot id tells their lifetimes apart
    boot = read_text("/proc/sys/kernel/random/boot_id").strip()
    info["boot_id"] = hashlib.sha256(boot.encode()).hexdigest()[:12] if boot else None
    return info


def read_text(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def utcnow() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def busy_cpus(window_s: float) -> float:
    """CPUs' worth of work the whole machine did over the next ``window_s`` seconds."""
    import psutil

    return psutil.cpu_percent(interval=window_s) / 100 * (psutil.cpu_count() or 1)


def wait_for_load(max_load: float, max_wait_s: float, poll_s: float = 5.0) -> float:
    """Sleep until the machine is quiet or ``max_wait_s`` passed; the seconds waited.

    Quiet: the 1-minute load average is at most ``max_load`` (what rows record) and, since that
    average trails by a minute, the CPU use right now (over 1 s, between two measurements) is at
    most ``max_load - 1``, at least 0.25 CPUs. Timings taken beside other work read slow
    (docs/labels.md), so a measurement waits rather than record a busy one.
    """
    start = time.monotonic()
    while time.monotonic() - start < max_wait_s:
        if os.getloadavg()[0] <= max_load and busy_cpus(1.0) <= max(max_load - 1.0, 0.25):
            break
        time.sleep(poll_s)
    return time.monotonic() - start


__all__ = ["slugify", "device_slug", "nvml_handle", "device_info", "read_text", "utcnow", "busy_cpus",
           "wait_for_load"]
