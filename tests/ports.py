"""Ports for servers a test starts (Serve, a Ray head): free now, and out of the OS's way.

Drawn from 20000-32767: below Linux's ephemeral range (32768-60999), where the OS hands ports to
the processes Ray starts meanwhile (a port it had just handed a test was taken before ``serve
run`` bound it), and above Ray's worker ports (10002-19999).
"""
from __future__ import annotations

import random
import socket

LOW, HIGH = 20000, 32768


def free_ports(n: int = 1) -> list[int]:
    """``n`` distinct ports nothing listens on now."""
    rng, found = random.Random(), []
    for _ in range(200 * n):
        port = rng.randrange(LOW, HIGH)
        if port in found:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        found.append(port)
        if len(found) == n:
            return found
    raise RuntimeError(f"no {n} free ports in {LOW}-{HIGH - 1}")
