"""Every environment variable fd_mtp reads, parsed in this one module (vLLM's ``envs.py`` pattern).

Kernels never read the environment: the Python wrappers resolve a keyword-only argument left at
None from the variable here, at call time (so a variable set by a running server takes effect at
the next call, as upstream's per-call ``getenv``). One rule per kind of variable:

* flags (``PREFILL_NODE_ONE_STEP_STOP``, ``PREFILL_NODE_ONE_STEP_STOP_V1``): on iff the value's
  first character is ``"1"`` (upstream's C++ test ``env[0] == '1'``); unset means off;
* integers (``SPECULATE_VERIFY_USE_*``, thresholds, queue ids): ``int(value)``; unset means the
  default; anything else raises ValueError naming the variable.

>>> import os
>>> os.environ["INFER_WITH_REFERENCE_TOKENUM_THRESHOLD"] = "64"
>>> get("INFER_WITH_REFERENCE_TOKENUM_THRESHOLD")
64
>>> del os.environ["INFER_WITH_REFERENCE_TOKENUM_THRESHOLD"]
>>> get("INFER_WITH_REFERENCE_TOKENUM_THRESHOLD")
128
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["VARIABLES", "EnvVar", "get"]


def _flag(name: str, raw: str) -> bool:
    return raw[:1] == "1"


def _int(name: str, raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None


def _choice(name: str, raw: str, choices: tuple[str, ...]) -> str:
    value = raw.strip().lower()
    if value not in choices:
        raise ValueError(f"environment variable {name}={raw!r} is not one of {', '.join(choices)}")
    return value


@dataclass(frozen=True)
class EnvVar:
    """One variable: its parser (``(name, raw) -> value``), its value when unset, and its meaning."""

    parse: Callable[[str, str], object]
    default: object
    doc: str


VARIABLES: dict[str, EnvVar] = {
    "PREFILL_NODE_ONE_STEP_STOP": EnvVar(
        _flag,
        False,
        "prefill node: stop every request after its first step (draft_model_update, speculate_verify)",
    ),
    "PREFILL_NODE_ONE_STEP_STOP_V1": EnvVar(
        _flag, False, "prefill node, v1 scheduler: one-step stop in speculate_schedule_cache"
    ),
    "SPECULATE_VERIFY_USE_TOPK": EnvVar(
        _int, 0, "nonzero: speculate_verify defaults to the 'topk' strategy"
    ),
    "SPECULATE_VERIFY_USE_TARGET_SAMPLING": EnvVar(
        _int, 0, "nonzero: speculate_verify defaults to the 'target_match' strategy (checked first)"
    ),
    "INFER_WITH_REFERENCE_TOKENUM_THRESHOLD": EnvVar(
        _int, 128, "ngram_match: token budget of the batch"
    ),
    "SPEC_TOKENUM_THRESHOLD": EnvVar(_int, 1024, "hybrid_mtp_ngram: token budget of the batch"),
    "INFERENCE_MSG_QUEUE_ID": EnvVar(_int, 1, "SysV message queue id of the output ops"),
    "INFERENCE_MSG_ID": EnvVar(_int, 1, "message id (header word) of the output ops' messages"),
    "FD_MTP_CUDA_MODULE_DIR": EnvVar(
        lambda name, raw: raw,
        None,
        "fd_mtp.cuda: load the raw CUDA module fd_mtp_cuda from this directory",
    ),
    "FD_MTP_OPS_LIB_DIR": EnvVar(
        lambda name, raw: raw,
        None,
        "fd_mtp.ops: load the op library (libfd_mtp_ops.so, fd_mtp_ops_pybind) from this "
        "directory instead of fd_mtp/_lib (make test: the Paddle GPU build's build/paddle-gpu/lib)",
    ),
    "FD_MTP_CUDA_ERRORS": EnvVar(
        lambda name, raw: _choice(name, raw, ("deferred", "checked", "record")),
        "deferred",
        "the error mode of fd_mtp.cuda and of the Paddle ops' GPU branch (docs/gpu_errors.md; "
        "fd_mtp.ops reads it when it loads the library): deferred (no sync per op; errors raise at "
        "the step's own syncs or check_pending), checked (sync and raise after each op), record "
        "(never raise; check_pending reads)",
    ),
}


def get(name: str):
    """The parsed value of variable ``name`` now (its default when unset)."""
    var = VARIABLES[name]
    raw = os.environ.get(name)
    return var.default if raw is None else var.parse(name, raw)
