"""Connect to a Ray cluster, or start a private local one bound to the loopback interface."""
from __future__ import annotations

import os


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> bool:
    """``ray.init`` once per process.

    Args:
        address: an existing cluster (``auto``, ``ray://...`` or ``host:port``); None starts a
            new private local cluster that listens on 127.0.0.1 only and has no dashboard, even
            beside one that ``ray start`` runs on this machine (so does ``local``). Default: the
            ``RAY_ADDRESS`` environment variable.
        num_cpus: CPUs of a local cluster (None = all).

    Returns:
        True when this call initialised Ray, False when it already was.
    """
    # Ray 2.60 reads this once, at import, and otherwise replaces the loopback node IP with the
    # host's address, its servers then listening on every interface (measured with `ss -ltn`);
    # with it they listen on 127.0.0.1 only. It must be set before ray is first imported.
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray

    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    if address and address != "local":
        ray.init(address=address, log_to_driver=True)
        return True
    # Workers of a local cluster inherit this process's environment (S3 endpoint, credentials).
    # "local" starts a private one even beside a `ray start` cluster on this machine, which
    # ray.init() would otherwise join (and refuse, as num_cpus cannot be set there).
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1")
    return True
