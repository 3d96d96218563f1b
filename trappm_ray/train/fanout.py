"""The one Ray fan-out of model fitting: graphs shared once in the object store, one task per fit.

Training, evaluation, transfer and the recipe benchmark all fit many small regressors on the same
graphs; a plain ``@ray.remote`` task per fit is ~100x cheaper than a Tune trial on a small machine,
and putting the packed graphs in the object store once lets every task read them without a copy.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from tqdm.auto import tqdm

from trappm_ray.train.regressors import embed, pack_graphs

log = logging.getLogger(__name__)

Call = tuple[Callable, tuple, dict]  # (function, args, kwargs)


def share_graphs(data: list, encoder) -> tuple[Any, Any]:
    """Object-store references to prepared graphs (packed) and their encoder embeddings."""
    import ray

    return ray.put(pack_graphs(data)), ray.put(embed(encoder, data))


def fan_out(calls: Mapping[Hashable, Call], desc: str, num_cpus: float = 1) -> dict[Hashable, Any]:
    """Run every call as a Ray task (``num_cpus`` each) and collect the results by key.

    Args:
        calls: key -> (function, args, kwargs); object references among the args are resolved
            by Ray in the worker.
        desc: what is being fitted, for the progress bar and the log.
        num_cpus: CPUs each task claims (1: fits run one per core).

    Returns:
        key -> the function's return value, in the order of ``calls``.

    Raises:
        The first task's exception (``ray.exceptions.RayTaskError``) if a task fails.
    """
    import ray

    remotes: dict[Callable, Any] = {}
    refs = {}
    for key, (fn, args, kwargs) in calls.items():
        if fn not in remotes:
            remotes[fn] = ray.remote(num_cpus=num_cpus)(fn)
        refs[remotes[fn].remote(*args, **kwargs)] = key
    log.info("%s: %d tasks", desc, len(refs))
    results, pending = {}, list(refs)
    with tqdm(total=len(refs), desc=desc, unit="fit", disable=None) as bar:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            results[refs[ready[0]]] = ray.get(ready[0])
            bar.update(1)
    return {key: results[key] for key in calls}


__all__ = ["Call", "share_graphs", "fan_out"]
