"""A second process for the tests of memory shared across processes (tests/ops/test_ipc.py on
fd_mtp.ops, tests/gpu/test_gpu_ipc.py on fd_mtp.cuda): the test sends commands over a Pipe to a
child started with multiprocessing's 'spawn', and the child answers each with ``("ok", result)``
or ``("err", exception type name, message)``. Imports neither paddle nor CuPy (each worker
imports what its commands need)."""

from __future__ import annotations

import multiprocessing as mp

__all__ = ["Child", "serve_commands"]


class Child:
    """A spawned process running ``serve(conn, root)`` (a worker module's loop, see
    `serve_commands`; ``root`` is put on the child's sys.path). Each answer must come within
    ``timeout`` seconds."""

    def __init__(self, serve, root: str, timeout: float):
        self.timeout = timeout
        ctx = mp.get_context("spawn")
        self.conn, child_conn = ctx.Pipe()
        self.proc = ctx.Process(target=serve, args=(child_conn, root), daemon=True)
        self.proc.start()
        child_conn.close()

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


def serve_commands(conn, handle) -> None:
    """The child's loop: receives ``(cmd, *args)`` and answers ``("ok", handle(cmd, args))``, or
    ``("err", type name, message)`` for any exception (the test decides); ``"exit"`` answers
    ``("ok", None)`` and returns normally."""
    while True:
        cmd, *args = conn.recv()
        if cmd == "exit":
            conn.send(("ok", None))
            return
        try:
            conn.send(("ok", handle(cmd, args)))
        except Exception as exc:  # reported to the test, which decides
            conn.send(("err", type(exc).__name__, str(exc)))
