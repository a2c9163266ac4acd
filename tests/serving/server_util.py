"""A real ``fd-mtp serve`` process on 127.0.0.1 (a free port chosen by the OS) for the serving tests,
and small helpers to read its Prometheus metrics. Importing it skips the importing test module where
fastapi, uvicorn or httpx is missing."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

# What a served test needs, so that importing this module skips the test module without it: the
# server's web stack, and httpx for the helpers below.
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 90


#: the served model's name (the shipped demo model)
MODEL = "ernie45_tiny_mtp"
#: keywords of a greedy completions / chat request to `MODEL` that returns the token ids
GREEDY_IDS = dict(model=MODEL, temperature=0, extra_body={"return_token_ids": True})

#: what `ServerProcess` runs by default, and ``fd-mtp serve`` (the console script's module)
API_SERVER = ("-m", "fd_mtp.entrypoints.openai.api_server")
FD_MTP_SERVE = ("-m", "fd_mtp.cli", "serve")


class ServerProcess:
    """``python -m fd_mtp.entrypoints.openai.api_server --port 0 ARGS`` (``command``: what follows
    the interpreter instead, e.g. `FD_MTP_SERVE`) in a subprocess; `wait_ready` returns once it
    printed its address, `terminate` sends SIGTERM and waits (bounded)."""

    def __init__(self, *args: str, command: tuple[str, ...] = API_SERVER):
        self.command = tuple(command)
        self.args = ["--port", "0", "--host", "127.0.0.1", *args]
        self.proc: subprocess.Popen | None = None
        self.url = None
        self.lines: queue.Queue = queue.Queue()
        self.output: list[str] = []

    def launch(self) -> ServerProcess:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, *self.command, *self.args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.output.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def wait_ready(self) -> ServerProcess:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                self.url = m.group(1)
                return self
        self.kill()
        raise RuntimeError("server did not start:\n" + "".join(self.output))

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM, then wait for the exit status (SIGKILL after ``timeout``)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def stop(proc: ServerProcess, timeout: float = 30) -> None:
    """`ServerProcess.terminate`, killing the server where that fails or times out."""
    try:
        proc.terminate(timeout=timeout)
    except Exception:
        proc.kill()


@contextlib.contextmanager
def running(procs, timeout: float = 30):
    """Launches the servers of ``procs`` (a dict, or one `ServerProcess`) all at once, waits until
    each is ready and yields ``procs``; on the way out `stop`s each (``timeout``: SIGTERM's bound)."""
    each = list(procs.values()) if isinstance(procs, dict) else [procs]
    try:
        for p in each:
            p.launch()
        for p in each:
            p.wait_ready()
        yield procs
    finally:
        for p in each:
            stop(p, timeout)


def openai_client(url: str, timeout: float = 60):
    """The official ``openai`` client of the server at ``url`` (no retries)."""
    import openai

    return openai.OpenAI(base_url=f"{url}/v1", api_key="none", timeout=timeout, max_retries=0)


def metrics(url: str) -> dict[str, float]:
    """``{'name{labels}': value}`` of the server's /metrics (labels without model_name)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, value = line.rsplit(" ", 1)
        key = re.sub(r'model_name="[^"]*",?', "", key).replace("{}", "").replace(",}", "}")
        out[key] = float(value)
    return out


def wait_for(predicate, timeout: float = 20, interval: float = 0.05, what: str = "condition"):
    """Poll ``predicate()`` until it returns a truthy value (returned), or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def greedy_pair(c, offline, prompt: str, max_tokens: int, model: str = MODEL):
    """One greedy completion of ``prompt`` (token ids returned, EOS ignored) from the server behind
    the ``openai`` client ``c`` and the same from ``offline`` (an `fd_mtp.LLM`): ``(the server's
    response, the offline RequestOutput)``."""
    import fd_mtp

    out = c.completions.create(
        model=model,
        prompt=prompt,
        max_tokens=max_tokens,
        temperature=0,
        extra_body={"return_token_ids": True, "ignore_eos": True},
    )
    [want] = offline.generate(
        [prompt], fd_mtp.SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    )
    return out, want
