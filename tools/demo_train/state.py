"""The demo training's state (tools/train_demo_model.py): learning rate, optimizer, the snapshot
written every ``--save-every`` steps (and read back by ``--resume`` / ``--from-state``), and the
warm start of ``--init-from``."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

STATE_FILES = ("state.pdparams", "state.pdopt", "state.json")


def lr_at(step: int, args) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.lr * (
        args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t))
    )


def make_optimizer(args, *layers):
    """AdamW over the parameters of ``layers`` (betas 0.9 / 0.95, ``args.weight_decay`` on
    matrices only, global-norm clipping ``args.clip``)."""
    import paddle

    params = [p for layer in layers for p in layer.parameters()]
    decay = {p.name for p in params if len(p.shape) >= 2}
    return paddle.optimizer.AdamW(
        learning_rate=args.lr,
        parameters=params,
        beta1=0.9,
        beta2=0.95,
        epsilon=1e-8,
        weight_decay=args.weight_decay,
        apply_decay_param_fun=lambda n: n in decay,
        grad_clip=paddle.nn.ClipGradByGlobalNorm(args.clip),
    )


def checkpoint_tensors(model, mtp) -> dict:
    sd = {k: v for k, v in model.state_dict().items()}
    sd.update(mtp.state_dict())
    return sd


def _param_names(*layers) -> dict[str, str]:
    """Paddle's generated parameter name (``linear_3.w_0``, different in every process that built
    other layers first) -> checkpoint name."""
    out = {}
    for layer in layers:
        out.update({p.name: k for k, p in layer.named_parameters()})
    return out


def optimizer_state(opt, *layers) -> dict:
    """The optimizer's state with accumulators keyed ``checkpoint_name/suffix``, so a snapshot loads
    into models built anywhere (Paddle keys them by generated names)."""
    names = _param_names(*layers)
    out = {}
    for key, v in opt.state_dict().items():
        owner = next((n for n in names if key.startswith(n + "_")), None)
        out[f"{names[owner]}/{key[len(owner) + 1 :]}" if owner else key] = v
    return out


def load_optimizer_state(opt, state: dict, *layers) -> None:
    by_ckpt = {k: n for n, k in _param_names(*layers).items()}
    fixed = {}
    for key, v in state.items():
        if "/" in key:
            ckpt, suffix = key.split("/", 1)
            key = f"{by_ckpt[ckpt]}_{suffix}"
        fixed[key] = v
    opt.set_state_dict(fixed)


def write_state(out: Path, params: dict, opt_state: dict, meta: dict) -> None:
    """The snapshot files of ``STATE_FILES``, each replaced whole (state.json last: a snapshot
    is complete once its json is in place)."""
    import paddle

    tmp = out / "state.tmp"
    tmp.mkdir(exist_ok=True)
    paddle.save(params, str(tmp / "state.pdparams"))
    paddle.save(opt_state, str(tmp / "state.pdopt"))
    (tmp / "state.json").write_text(json.dumps(meta, indent=1) + "\n")
    for name in STATE_FILES:
        os.replace(tmp / name, out / name)
    tmp.rmdir()


def save_state(out: Path, model, mtp, opt, meta: dict) -> None:
    write_state(out, checkpoint_tensors(model, mtp), optimizer_state(opt, model, mtp), meta)


# --------------------------------------------------------------------------- the loop
def should_stop(step: int, args, deadline) -> bool:
    """``--max-minutes`` (``deadline``, a time.time() value or None) or ``--stop-after`` reached."""
    import time

    return (deadline is not None and time.time() >= deadline) or (
        args.stop_after is not None and step >= args.stop_after
    )


def draw_batch(sampler, tokens, win: int, batch_size: int):
    """``[batch_size, win]`` int64 windows at uniform starts of the ``tokens`` stream."""
    import numpy as np

    starts = sampler.integers(0, len(tokens) - win, size=batch_size)
    return np.stack([tokens[s : s + win] for s in starts]).astype(np.int64)


def progress_bar(args, step: int):
    """A tqdm bar from ``step`` to ``args.steps`` on stdout, or None with ``--no-progress``."""
    if args.no_progress:
        return None
    import sys

    from tqdm import tqdm

    return tqdm(
        total=args.steps,
        initial=step,
        desc="train",
        dynamic_ncols=True,
        file=sys.stdout,
        mininterval=5,
    )


def log_row(bar, row: dict, show: bool) -> None:
    """The row as ``key=value`` words, through the bar when there is one; printed when ``show``
    (an evaluation row) or, without a bar, every 10 steps."""
    if not (show or (bar is None and row["step"] % 10 == 0)):
        return
    msg = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
    if bar is not None:
        bar.write(msg)
    else:
        print(msg, flush=True)


def load_params(state_dir: Path, model, mtp) -> None:
    import paddle

    sd = paddle.load(str(state_dir / "state.pdparams"))
    want = set(checkpoint_tensors(model, mtp))
    if set(sd) != want:
        raise SystemExit(
            f"{state_dir / 'state.pdparams'} does not match the model: missing "
            f"{sorted(want - set(sd))[:5]}, unexpected {sorted(set(sd) - want)[:5]}"
        )
    model.set_state_dict({k: v for k, v in sd.items() if not k.startswith("ernie.mtp_")})
    mtp.set_state_dict({k: v for k, v in sd.items() if k.startswith("ernie.mtp_")})


INIT_MATCH_FIELDS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rope_theta",
    "rms_norm_eps",
    "tie_word_embeddings",
    "num_nextn_predict_layers",
)


def init_from_checkpoint(src: Path, cfg, model, mtp) -> dict:
    """Warm start: copy the weights of the exported checkpoint ``src`` into the trainable models
    (its shapes must be this run's: the fields of ``INIT_MATCH_FIELDS`` are compared first).
    Returns what the run records of it (its training summary)."""
    from fd_mtp.model.config import ErnieConfig
    from fd_mtp.model.loader import SafetensorsCheckpoint, load_weights

    if not (src / "config.json").is_file():
        raise SystemExit(f"--init-from {src}: no config.json (not a checkpoint directory)")
    theirs = ErnieConfig.from_file(src / "config.json")
    diff = [
        f"{f} {getattr(theirs, f)!r} (this run: {getattr(cfg, f)!r})"
        for f in INIT_MATCH_FIELDS
        if getattr(theirs, f) != getattr(cfg, f)
    ]
    if diff:
        raise SystemExit(
            f"--init-from {src}: its config differs from this run's model options: "
            + "; ".join(diff)
        )
    with SafetensorsCheckpoint.from_dir(src) as tensors:
        load_weights(model, tensors, strict=True, progress=False)
        load_weights(mtp, tensors, strict=True, progress=False)
    for layer in (model, mtp):
        for prm in layer.parameters():
            prm.stop_gradient = False
        layer.train()
    record = {"dir": str(src)}
    info_file = src / "train_info.json"
    if info_file.is_file():
        info = json.loads(info_file.read_text())
        record.update(
            {
                k: info.get(k)
                for k in (
                    "step",
                    "tokens_seen",
                    "tokens_seen_total",
                    "wall_time_s",
                    "wall_time_s_total",
                    "command",
                    "steps_planned",
                    "stopped_early",
                )
            }
        )
        record["final_val"] = info.get("final_val")
        if info.get("init_from"):
            record["init_from"] = info["init_from"]
    return record
