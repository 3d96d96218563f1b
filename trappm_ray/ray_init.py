"""Connect to a Ray cluster, or start a private local one bound to the loopback interface."""
from __future__ import annotations

import os


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """``ray.init`` once per process.

    Args:
        address: an existing cluster (``auto``, ``ray://...`` or ``host:port``); None starts a
            local cluster that listens on 127.0.0.1 only and has no dashboard.
        num_cpus: CPUs of a local cluster (None = all).
    """
    import ray

    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=True)
        return
    # Workers of a local cluster inherit this process's environment (S3 endpoint, credentials).
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1")
