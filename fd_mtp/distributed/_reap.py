"""Stopping worker processes: shared by the tensor-parallel front and the PD cluster."""

from __future__ import annotations

import time


def reap(processes, commands, stop_message, grace: float = 10.0) -> None:
    """Sends ``stop_message`` on every command queue of ``commands``, waits up to ``grace``
    seconds in all for ``processes`` to exit, then terminates and finally kills what is left
    (5 s each). Queues already closed are skipped."""
    for q in commands:
        try:
            q.put(stop_message)
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + grace
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in processes:
        if p.is_alive():
            p.terminate()
            p.join(5.0)
        if p.is_alive():
            p.kill()
            p.join(5.0)
