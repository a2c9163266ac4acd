"""A second process for the tests of memory shared across processes (tests/ops/test_ipc.py on
fd_mtp.ops, tests/gpu/test_gpu_ipc.py on fd_mtp.cuda): the test sends commands over a Pipe to a
child started with multiprocessing's 'spawn', and the child answers each with ``("ok", result)``
or ``("err", exception type name, message)``. Imports neither paddle nor CuPy (each worker
imports what its commands need)."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import os

__all__ = ["Child", "serve_commands", "new_shm_segments", "shm_entries"]


class Child:
    """A spawned process running ``serve(conn, root)`` (a worker module's loop, see
    `serve_commands`; ``root`` is put on the child's sys.path). Each answer must come within
    ``timeout`` seconds. As a context manager it `exit`s at the end of the block."""

    def __init__(self, serve, root: str, timeout: float):
        self.timeout = timeout
        ctx = mp.get_context("spawn")
        self.conn, child_conn = ctx.Pipe()
        self.proc = ctx.Process(target=serve, args=(child_conn, root), daemon=True)
        self.proc.start()
        child_conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.exit()

    def _ask(self, msg):
        self.conn.send(msg)
        if not self.conn.poll(self.timeout):
            raise AssertionError(
                f"the child process did not answer {msg[0]!r} within {self.timeout} s"
            )
        return self.conn.recv()

    def call(self, *msg):
        """The result of a command that must succeed in the child (else AssertionError)."""
        answer = self._ask(msg)
        if answer[0] == "err":
            raise AssertionError(f"child failed on {msg[0]!r}: {answer[1]}: {answer[2]}")
        return answer[1]

    def try_call(self, *msg):
        """(error type name, message) of a command that must fail in the child."""
        answer = self._ask(msg)
        assert answer[0] == "err", f"child: {msg[0]!r} unexpectedly succeeded"
        return answer[1], answer[2]

    def exit(self):
        """Asks the child to return (its interpreter's exit handlers run); asserts exit code 0."""
        if self.proc.is_alive():
            try:
                self.call("exit")
            except (AssertionError, OSError, EOFError):
                pass
        self.proc.join(self.timeout)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(10)
        assert self.proc.exitcode == 0, f"child exit code {self.proc.exitcode}"


def serve_commands(conn, handle, held: dict | None = None) -> None:
    """The child's loop: receives ``(cmd, *args)`` and answers ``("ok", handle(cmd, args))``, or
    ``("err", type name, message)`` for any exception (the test decides); ``"exit"`` answers
    ``("ok", None)`` and returns normally. With ``held`` (the worker's live objects by key),
    ``("free", key)`` drops ``held[key]`` and collects garbage (its deleters run)."""
    while True:
        cmd, *args = conn.recv()
        if cmd == "exit":
            conn.send(("ok", None))
            return
        try:
            if cmd == "free" and held is not None:
                del held[args[0]]
                gc.collect()
                conn.send(("ok", None))
            else:
                conn.send(("ok", handle(cmd, args)))
        except Exception as exc:  # reported to the test, which decides
            conn.send(("err", type(exc).__name__, str(exc)))


def shm_entries(prefixes: tuple[str, ...]) -> set[str]:
    """The names in /dev/shm that start with one of ``prefixes``."""
    return {e for e in os.listdir("/dev/shm") if e.startswith(prefixes)}


@contextlib.contextmanager
def new_shm_segments(prefixes: tuple[str, ...]):
    """``with new_shm_segments(prefixes) as leaked:`` at the end of the block (after a garbage
    collection) ``leaked`` holds the `shm_entries` made in the block and not removed by it; they
    are unlinked (a failed run leaves nothing behind for the next), the test judges."""
    before = shm_entries(prefixes)
    leaked: set[str] = set()
    try:
        yield leaked
    finally:
        gc.collect()
        leaked.update(shm_entries(prefixes) - before)
        for entry in leaked:
            os.unlink(f"/dev/shm/{entry}")
