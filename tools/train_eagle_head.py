#!/usr/bin/env python
"""Train an EAGLE-3 draft head for the demo model (``fd_mtp/assets/ernie45_tiny_eagle3``) on a CPU.

What it trains: an `fd_mtp.model.eagle.EagleHead` (``method="eagle3"``: ``fc`` fusing the target's
aux streams, ``enorm`` / ``hnorm`` / ``eh_proj``, one dense ERNIE-4.5 decoder layer, its final
norm and an lm_head over its own draft vocabulary; the target's embedding, shared and frozen)
against the frozen target checkpoint (default: the shipped demo model), on the target's own
training corpus (the held-in ``.py`` files of the standard library, `fd_mtp.assets.corpus`;
the target's tokenizer).

Loss (EAGLE-3's training-time test, `tools/demo_train/eagle.py` has the exact rows): the head
runs K = ``--ttt-steps`` draft steps as inference runs them (step 1 on the target's aux streams,
step k on its own step k-1 output, each step attending to what inference's KV cache would hold),
and step k's logits are pulled towards the target's next-token distribution at t+k restricted to
the draft vocabulary (soft cross-entropy, weight 0.8^(k-1)). The log and validation report each
step's top-1 agreement with the target's greedy token: the per-position acceptance a greedy
speculative decoder would see on that text (validation also gives the target's MTP block's, on
the same rows).

Draft vocabulary: the ``--draft-vocab`` most frequent ids of the training stream (``d2t`` their
offsets). Aux layers: ``--aux-layers`` (default ``1,L//2,L-1``: the streams entering a low, the
middle and the last layer; vLLM's default ``(2, L//2, L-3)`` repeats a layer when L = 6).
Initialisation: ``--init mtp`` (default) copies the target's MTP block (same shapes but ``fc``, see
`demo_train.eagle.warm_start_from_mtp`); ``--init random`` starts from N(0, 0.02).

Training: float32, [B, S+K] windows drawn uniformly from the training stream by a seeded numpy
generator, AdamW (betas 0.9/0.95, weight decay 0.1 on matrices), linear warmup + cosine decay to
10 %, global-norm clipping 1.0. ``--save-every`` steps the state goes to ``--out`` and
``--resume`` continues from it; ``--max-minutes`` stops cleanly (evaluates, saves, exports).

Outputs (``--export``): config.json + model.safetensors (`fd_mtp.model.eagle`'s layout, which
`fd_mtp.model.eagle_io.load_eagle_head` reads back), README.md, train_log.csv, loss_curve.png, train_info.json.

The defaults are the shipped head's run (its README has the exact command); about an hour on
two idle cores::

    python tools/train_eagle_head.py --out runs/eagle3    # writes fd_mtp/assets/ernie45_tiny_eagle3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT))

DEFAULT_EXPORT = ROOT / "fd_mtp" / "assets" / "ernie45_tiny_eagle3"
FINAL_RESERVE_S = 60  # --max-minutes: kept for the final evaluation, snapshot and export
LOG_FIELDS = ["step", "elapsed_s", "lr", "loss"] + [
    f"{p}{k}_{i}" for p in ("", "val_") for k in ("loss", "acc") for i in (1, 2, 3)
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tools/train_eagle_head.py", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--target", type=Path, default=None, help="target checkpoint (default: demo)")
    p.add_argument("--out", type=Path, required=True, help="run directory (state, caches)")
    p.add_argument("--export", type=Path, default=DEFAULT_EXPORT, help="the head's directory")
    p.add_argument(
        "--steps", type=int, default=400, help="optimizer steps (the lr schedule's length)"
    )
    p.add_argument("--batch-size", type=int, default=8, help="windows per step")
    p.add_argument(
        "--seq-len", type=int, default=128, help="rows per window (S; windows are S+K long)"
    )
    p.add_argument("--ttt-steps", type=int, default=3, help="K: draft steps trained")
    p.add_argument(
        "--draft-vocab", type=int, default=2048, help="draft vocabulary: the most frequent ids"
    )
    p.add_argument("--aux-layers", default=None, help="comma-separated target layer ids")
    p.add_argument("--intermediate-size", type=int, default=None, help="default: the target's")
    p.add_argument("--init", choices=("mtp", "random"), default="mtp")
    p.add_argument("--lr", type=float, default=5e-4, help="peak learning rate (AdamW)")
    p.add_argument("--min-lr-ratio", type=float, default=0.1, help="cosine floor / peak")
    p.add_argument("--warmup", type=int, default=20, help="linear warmup steps")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--eval-every", type=int, default=50, help="validation every N steps")
    p.add_argument("--eval-windows", type=int, default=32, help="held-out validation windows")
    p.add_argument("--save-every", type=int, default=25, help="snapshot every N steps")
    p.add_argument(
        "--max-minutes",
        type=float,
        default=None,
        help="stop cleanly (evaluate, save, export) by then",
    )
    p.add_argument("--stop-after", type=int, default=None, help="stop (and save) at this step")
    p.add_argument("--resume", action="store_true", help="continue from the snapshot in --out")
    p.add_argument(
        "--corpus-dir", type=Path, default=None, help="corpus root (default: the standard library)"
    )
    p.add_argument("--threads", type=int, default=2, help="CPU threads (OMP / MKL / Paddle)")
    p.add_argument("--no-progress", action="store_true", help="log lines instead of a tqdm bar")
    return p


def _build(args, target_dir: Path, train_tokens):
    """(target, mtp, head, draft ids, coverage) for this run's options."""
    import paddle
    from demo_train.eagle import (
        draft_vocabulary,
        make_eagle3_head,
        random_init,
        warm_start_from_mtp,
    )

    from fd_mtp.model.loader import load_checkpoint

    target, mtp, tcfg = load_checkpoint(target_dir, progress=False)
    L = tcfg.num_hidden_layers
    aux = (
        [1, L // 2, L - 1]
        if args.aux_layers is None
        else [int(x) for x in args.aux_layers.split(",") if x.strip()]
    )
    ids, coverage = draft_vocabulary(train_tokens, tcfg.vocab_size, args.draft_vocab)
    head = make_eagle3_head(target, ids, aux, args.intermediate_size)  # ValueError by field name
    cfg = head.head_config
    draft_ids = paddle.to_tensor(ids)
    if args.init == "mtp":
        if mtp is None or cfg.layer_config.intermediate_size != tcfg.intermediate_size:
            raise SystemExit("--init mtp needs a target with an MTP block of the head's shapes")
        warm_start_from_mtp(head, mtp, target, draft_ids)
    else:
        random_init(head, args.seed)
    for prm in head.parameters():
        prm.stop_gradient = False
    head.train()
    return target, mtp, head, draft_ids, coverage


def _plot(path: Path, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4), dpi=110)
    for k in (1, 2, 3):
        pts = [(r["step"], r[f"loss_{k}"]) for r in rows if f"loss_{k}" in r]
        if pts:
            a1.plot(*zip(*pts), lw=0.7, alpha=0.8, label=f"train step {k}")
        pts = [(r["step"], r[f"val_acc_{k}"]) for r in rows if f"val_acc_{k}" in r]
        if pts:
            a2.plot(*zip(*pts), "o-", ms=3, label=f"head step {k}")
    for k in (1, 2):
        pts = [(r["step"], r[f"val_mtp_acc_{k}"]) for r in rows if f"val_mtp_acc_{k}" in r]
        if pts:
            a2.plot(*zip(*pts), "--", lw=1, label=f"MTP block step {k}")
    a1.set(xlabel="step", ylabel="soft cross-entropy (nats)", title="training loss per draft step")
    a2.set(xlabel="step", ylabel="top-1 agreement with the target", title="validation")
    for a in (a1, a2):
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _export(dest: Path, head, info: dict, rows: list[dict]) -> None:
    import csv

    from fd_mtp.model.eagle_io import save_eagle_head

    save_eagle_head(head, dest)
    with open(dest / "train_log.csv", "w", newline="") as f:
        fields = LOG_FIELDS + ["val_mtp_acc_1", "val_mtp_acc_2"]
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    _plot(dest / "loss_curve.png", rows)
    (dest / "train_info.json").write_text(json.dumps(info, indent=2) + "\n")
    (dest / "README.md").write_text(_readme(info))


def _readme(info: dict) -> str:
    v = info["final_val"]
    acc = ", ".join(f"{100 * v.get(f'val_acc_{k}', float('nan')):.1f} %" for k in (1, 2, 3))
    mtp = ", ".join(f"{100 * v.get(f'val_mtp_acc_{k}', float('nan')):.1f} %" for k in (1, 2))
    c = info["head_config"]
    return f"""# ernie45_tiny_eagle3: an EAGLE-3 draft head for the demo model

An EAGLE-3 head (`speculative_config={{"method": "eagle3", "model": <this directory>}}`) for the
shipped demo model `ernie45_tiny_mtp`, trained by `tools/train_eagle_head.py` against that
model's outputs on its own training corpus. Layout: `fd_mtp.model.eagle` (config.json +
model.safetensors, Paddle `[in, out]` linear weights; the target's embedding is shared).

* Head: `fc` fusing the streams entering target layers {c["eagle_aux_hidden_state_layer_ids"]},
  one dense ERNIE-4.5 decoder layer (intermediate {c["intermediate_size"]}), draft vocabulary of
  {c["draft_vocab_size"]} ids (the most frequent of the training stream, covering
  {100 * info["draft_vocab_coverage"]:.1f} % of its tokens; `d2t` maps them to target ids);
  {info["params"]:,} parameters.
* Initialisation: {info["init"]}.
* Training: {info["step"]} steps of {info["batch_size"]} x {info["seq_len"]} tokens,
  {info["ttt_steps"]} training-time-test steps (soft cross-entropy against the target's
  distribution over the draft vocabulary, weights 0.8^(k-1)), AdamW, peak lr {info["lr"]},
  {info["threads"]} CPU thread(s), {info["wall_time_s"] / 60:.1f} minutes.
* Validation (held-out standard-library windows, the target's greedy token as the label): top-1
  agreement of draft steps 1, 2, 3: {acc}; the target's own MTP block on the same rows
  (steps 1, 2): {mtp}.

Files: `train_log.csv`, `loss_curve.png`, `train_info.json`.

Reproduce (from the repository root):

```
{info["command"]}
```
"""


def main(argv=None) -> int:
    t_start = time.time()
    args = build_parser().parse_args(argv)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    import numpy as np
    import paddle
    from demo_train.corpus import tokenize
    from demo_train.eagle import evaluate, head_losses, target_forward
    from demo_train.model import validation_windows
    from demo_train.state import (
        draw_batch,
        load_optimizer_state,
        log_row,
        lr_at,
        make_optimizer,
        optimizer_state,
        progress_bar,
        should_stop,
        write_state,
    )

    from fd_mtp.assets import default_model_path
    from fd_mtp.assets.corpus import split_corpus, stdlib_root
    from fd_mtp.model.loader import load_tokenizer

    paddle.set_device("cpu")
    paddle.base.core.set_num_threads(args.threads)
    paddle.seed(args.seed)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    target_dir = Path(args.target or default_model_path())
    tok = load_tokenizer(target_dir)
    train_files, val_files = split_corpus(args.corpus_dir or stdlib_root())
    train_tokens = tokenize(out, tok, train_files, "train", check_roundtrip=False)
    val_tokens = tokenize(out, tok, val_files, "val", check_roundtrip=False)
    target, mtp, head, draft_ids, coverage = _build(args, target_dir, train_tokens)
    K = args.ttt_steps
    win = args.seq_len + K
    val_windows = validation_windows(val_tokens, args.eval_windows, win)
    opt = make_optimizer(args, head)
    sampler = np.random.default_rng(args.seed)
    n_params = int(sum(int(np.prod(p.shape)) for p in head.parameters()))
    rows: list[dict] = []
    step, elapsed0 = 0, 0.0
    command = " ".join(
        ["python", "tools/train_eagle_head.py", *(sys.argv[1:] if argv is None else argv)]
    )
    if args.resume and (out / "state.json").is_file():
        meta = json.loads((out / "state.json").read_text())
        head.set_state_dict(paddle.load(str(out / "state.pdparams")))
        load_optimizer_state(opt, paddle.load(str(out / "state.pdopt")), head)
        sampler.bit_generator.state = meta["sampler_state"]
        step, elapsed0, rows, command = (
            meta["step"],
            meta["elapsed_s"],
            meta["log"],
            meta["command"],
        )
        print(f"resumed from {out} at step {step}", flush=True)
    else:
        rows.append({"step": 0, **evaluate(head, target, mtp, val_windows, draft_ids, K, 8)})
        print(f"step 0 (initial head) validation: {rows[-1]}", flush=True)
    print(
        f"target {target_dir}; {len(train_tokens):,} training tokens, draft vocabulary "
        f"{args.draft_vocab} (covers {100 * coverage:.1f} %), aux layers "
        f"{list(head.aux_layer_ids)}, {n_params:,} "
        f"parameters, threads {args.threads}",
        flush=True,
    )
    t0 = time.time()

    def meta(**extra):
        return {
            "step": step,
            "elapsed_s": elapsed0 + time.time() - t0,
            "sampler_state": sampler.bit_generator.state,
            "log": rows,
            "command": command,
            **extra,
        }

    def save(m):
        write_state(out, dict(head.named_parameters()), optimizer_state(opt, head), m)

    deadline = (
        None if args.max_minutes is None else t_start + 60 * args.max_minutes - FINAL_RESERVE_S
    )
    bar = progress_bar(args, step)
    stopped_early = False
    while step < args.steps:
        if should_stop(step, args, deadline):
            stopped_early = True
            break
        batch = draw_batch(sampler, train_tokens, win, args.batch_size)
        lr = lr_at(step, args)
        opt.set_lr(lr)
        w = paddle.to_tensor(batch)
        r = head_losses(
            head, target_forward(target, w, head.aux_layer_ids, draft_ids), w, draft_ids, K
        )
        r["loss"].backward()
        opt.step()
        opt.clear_grad()
        step += 1
        row = {"step": step, "elapsed_s": round(elapsed0 + time.time() - t0, 2), "lr": lr}
        row.update({k: float(v) for k, v in r.items()})
        if not math.isfinite(row["loss"]):
            raise SystemExit(f"step {step}: loss is {row['loss']}")
        if step % args.eval_every == 0 or step == args.steps:
            row.update(evaluate(head, target, mtp, val_windows, draft_ids, K, 8))
        rows.append(row)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{row['loss']:.3f}", acc1=f"{row['acc_1']:.3f}")
        log_row(bar, row, "val_acc_1" in row)
        if step % args.save_every == 0:
            save(meta())
    if bar is not None:
        bar.close()
    if rows and "val_acc_1" not in rows[-1]:
        rows[-1].update(evaluate(head, target, mtp, val_windows, draft_ids, K, 8))
    m = meta(finished=step >= args.steps, stopped_early=stopped_early)
    save(m)
    c = head.head_config.to_dict()
    info = {
        "step": step,
        "steps_planned": args.steps,
        "stopped_early": stopped_early,
        "wall_time_s": round(m["elapsed_s"], 1),
        "threads": args.threads,
        "command": command,
        "target": str(
            target_dir.relative_to(ROOT) if target_dir.is_relative_to(ROOT) else target_dir
        ),
        "head_config": c,
        "draft_vocab_coverage": round(coverage, 4),
        "init": (
            "the target's MTP block (enorm, hnorm, eh_proj, decoder layer; norm and lm_head "
            "columns from the target; fc passes the last aux stream)"
            if args.init == "mtp"
            else f"random N(0, 0.02), seed {args.seed}"
        ),
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "ttt_steps": K,
        "lr": args.lr,
        "warmup": args.warmup,
        "seed": args.seed,
        "tokens_seen": step * args.batch_size * args.seq_len,
        "params": n_params,
        "corpus": {
            "train_files": len(train_files),
            "val_files": len(val_files),
            "train_tokens": int(len(train_tokens)),
            "val_tokens": int(len(val_tokens)),
        },
        "final_val": {k: v for k, v in rows[-1].items() if k.startswith("val_")},
        "initial_val": {k: v for k, v in rows[0].items() if k.startswith("val_")},
        "paddle_version": paddle.__version__,
        "platform": platform.platform(),
    }
    _export(args.export, head, info, rows)
    print(
        f"done: step {step}/{args.steps}{' (stopped early)' if stopped_early else ''}, "
        f"{info['wall_time_s'] / 60:.1f} min; validation {info['final_val']}; "
        f"exported to {args.export}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
