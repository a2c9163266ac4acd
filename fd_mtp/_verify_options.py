"""Options of speculate_verify that upstream read from environment variables or global state,
resolved in Python (never in a kernel) and shared by fd_mtp.ops, fd_mtp.cuda and fd_mtp.reference.

No numpy or paddle here: the strategy names, the environment defaults (spec §5.7 "Env"; the
variables are parsed by fd_mtp.envs, ``prefill_one_step_stop`` through its schema attribute) and
the seed/offset checks.
"""

from . import envs
from .schema import resolve_kw

__all__ = ["STRATEGIES", "resolve_verify_options"]

# verify_strategy names -> the kernel's VerifyStrategy codes (custom_ops/kernels/speculate_verify.h).
STRATEGIES = {"topp": 0, "topk": 1, "target_match": 2, "greedy": 3, "rejection": 4}


def resolve_verify_options(verify_strategy, prefill_one_step_stop, seed, offset, counter):
    """(strategy code, prefill_one_step_stop, seed, offset) with FastDeploy's defaults (§5.7 "Env").

    ``verify_strategy`` None: SPECULATE_VERIFY_USE_TARGET_SAMPLING != 0 -> "target_match", else
    SPECULATE_VERIFY_USE_TOPK != 0 -> "topk", else "topp". ``prefill_one_step_stop`` None:
    PREFILL_NODE_ONE_STEP_STOP starts with "1" (the variables as fd_mtp.envs parses them).
    ``seed`` / ``offset`` None: ``counter``.
    Shared by fd_mtp.ops, fd_mtp.cuda and fd_mtp.reference (each keeps its own counter).
    """
    if verify_strategy is None:
        if envs.get("SPECULATE_VERIFY_USE_TARGET_SAMPLING") != 0:
            verify_strategy = "target_match"
        elif envs.get("SPECULATE_VERIFY_USE_TOPK") != 0:
            verify_strategy = "topk"
        else:
            verify_strategy = "topp"
    if verify_strategy not in STRATEGIES:
        raise ValueError(
            f"speculate_verify: verify_strategy must be one of {sorted(STRATEGIES)}, got {verify_strategy!r}"
        )
    prefill_one_step_stop = resolve_kw(
        "speculate_verify", "prefill_one_step_stop", prefill_one_step_stop
    )
    seed = counter if seed is None else seed
    offset = counter if offset is None else offset
    for name, value in (("seed", seed), ("offset", offset)):
        if (
            isinstance(value, bool)
            or not hasattr(value, "__index__")
            or type(value).__name__ == "bool_"
        ):
            raise ValueError(
                f"speculate_verify: {name} must be an integer, got {type(value).__name__}"
            )
        if not 0 <= int(value) < 2**63:
            raise ValueError(f"speculate_verify: {name} must be in [0, 2**63), got {value}")
    return STRATEGIES[verify_strategy], bool(prefill_one_step_stop), int(seed), int(offset)
