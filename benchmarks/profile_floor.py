"""The floor of an engine step for benchmarks/bench_profile.py (and bench_prefix_cache.py): the matmul
rate and read bandwidth measured on this machine (`measure_rates`), the model's sizes
(`model_sizes`), and the step's floor from the work the timers recorded (`floor_ms`)."""

from __future__ import annotations

import time

import numpy as np


# --------------------------------------------------------------------------------- rates, floor
def measure_rates(weight_bytes: int, repeats: int = 7) -> dict:
    """Matmul GFLOP/s (paddle, float32, [256, 1024] x [1024, 1024]) and read bandwidth GB/s (a sum
    over a float32 array of ``weight_bytes``), best of ``repeats``."""
    import paddle

    x = paddle.randn([256, 1024])
    w = paddle.randn([1024, 1024])
    paddle.matmul(x, w)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(10):
            paddle.matmul(x, w)
        best = min(best, (time.perf_counter() - t0) / 10)
    gflops = 2 * 256 * 1024 * 1024 / best / 1e9
    arr = np.ones(max(weight_bytes // 4, 1 << 20), np.float32)
    arr.sum()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        arr.sum()
        best = min(best, time.perf_counter() - t0)
    return {"gflops": gflops, "read_gbs": arr.nbytes / best / 1e9, "read_bytes": arr.nbytes}


def model_sizes(llm) -> dict:
    """Linear weight counts per token (main model, MTP block), lm_head, bytes of weights."""
    runner = llm.engine.runner
    model = runner.model
    cfg = model.config
    h, v = cfg.hidden_size, cfg.vocab_size

    def linear_params(layers):
        n = 0
        for layer in layers:
            for name, p in layer.named_parameters():
                if p.ndim == 2 and "embed" not in name and "gate.weight" not in name:
                    n += int(np.prod(p.shape))
        return n

    main_linear = linear_params(model.layers)
    main_bytes = sum(int(np.prod(p.shape)) * 4 for p in model.parameters())
    mtp = getattr(getattr(runner, "proposer", None), "model", None)
    mtp_linear = mtp_bytes = 0
    if mtp is not None and hasattr(mtp, "mtp_block"):
        mtp_linear = linear_params([mtp.mtp_block]) + int(np.prod(mtp.eh_proj.weight.shape))
        mtp_bytes = sum(int(np.prod(p.shape)) * 4 for p in mtp.parameters()) + h * v * 4
    layers = cfg.num_hidden_layers
    return dict(
        hidden=h,
        vocab=v,
        layers=layers,
        heads=cfg.num_attention_heads,
        kv_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        main_linear=main_linear,
        mtp_linear=mtp_linear,
        main_bytes=main_bytes,
        mtp_bytes=mtp_bytes,
    )


def floor_ms(work: dict, steps: int, sizes: dict, rates: dict) -> tuple[float, float, float]:
    """(floor, FLOP part, bytes part) in ms per step from the work the split pass recorded."""
    s = sizes
    flops = bytes_ = 0.0
    for scope, linear, nlayers, wbytes in (
        ("target", s["main_linear"], s["layers"], s["main_bytes"]),
        ("mtp", s["mtp_linear"], 1, s["mtp_bytes"]),
    ):
        tokens = work.get((scope, "tokens"), 0.0)
        ctx = work.get((scope, "context"), 0.0)
        rows = work.get((scope, "logit_rows"), 0.0)
        forwards = work.get((scope, "forwards"), 0.0)
        flops += 2 * linear * tokens + 2 * s["hidden"] * s["vocab"] * rows
        flops += 4 * ctx * s["heads"] * s["head_dim"] * nlayers
        kv_row = 2 * s["kv_heads"] * s["head_dim"] * 4 * nlayers
        bytes_ += forwards * wbytes + ctx * kv_row / max(1.0, 1.0)
    f_ms = flops / steps / (rates["gflops"] * 1e9) * 1e3
    b_ms = bytes_ / steps / (rates["read_gbs"] * 1e9) * 1e3
    return max(f_ms, b_ms), f_ms, b_ms
