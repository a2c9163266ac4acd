#!/usr/bin/env python
"""Train the tiny ERNIE-4.5 + MTP demo checkpoint (``fd_mtp/assets/ernie45_tiny_mtp``) on a CPU.

What it trains: a dense ERNIE-4.5 (GQA, tied embeddings, interleaved RoPE) with one MTP block
(``num_nextn_predict_layers=1``), built from `fd_mtp.model.ernie` so parameter names are exactly
the checkpoint names, with the ERNIE / DeepSeek-V3 joint MTP loss::

    loss = CE(main logits at t, x[t+1])
         + lambda1 * CE(MTP step 1 at t, x[t+2])      # MTP input: embed(x[t+1]), main hidden h_t
         + lambda2 * CE(MTP step 2 at t, x[t+3])      # MTP input: embed(x[t+2]), MTP-1 hidden at t

With ``--unlikelihood ALPHA`` the main head also gets the token-level unlikelihood term of
Welleck et al., "Neural Text Generation with Unlikelihood Training" (ICLR 2020)::

    + ALPHA * mean_t sum_{c in C_t} -log(1 - p(c | x[..t]))    # C_t: tokens of x[0..t], not x[t+1]

which lowers the probability of repeating an earlier token of the window where the data does not
repeat it: the self-reinforcing loops of greedy decoding (the same line again and again) are what
it targets; the likelihood term still raises the true next token, repeated or not.

Step 2 is the same MTP block applied to its own normed output, as at inference with
``num_model_steps > 1`` (spec §10, §4.1 7.2.j). It is trained the way inference runs it: the step-2
token sits at MTP position t+1 (RoPE angle t+1) and attends to the step-1 keys/values of
positions 0..t (those the MTP KV cache holds at inference) and to itself.
lambda1 = 0.5 / lambda2 = 0.25 (defaults): the draft's acceptance rate is what this model
demonstrates, so the MTP losses weigh more than DeepSeek-V3's 0.3 -> 0.1, while the main loss
still dominates the shared embedding / final norm / lm_head.

Corpus: the ``.py`` sources of the running interpreter's standard library
(``sysconfig.get_paths()["stdlib"]``), which every Python installation has offline. Licence: the
Python Software Foundation License (PSF-2.0). Left out: ``site-packages``, every ``test`` /
``tests`` directory (``test/``, ``lib2to3/tests``, ``unittest/test``, ...), ``idlelib/``,
``pydoc_data/`` and ``encodings/`` (generated tables), and files over 200 kB. Sorted by relative
path; a file is held out for validation when ``zlib.crc32(relpath) % 20 == 0``.
Options that widen or clean the corpus (each recorded in ``train_info.json`` and the README):
``--with-tests`` adds the standard library's own test files to the training side;
``--library-code`` adds the hand-written library code of the project's installed dependencies
(``fd_mtp.assets.corpus.library_files``: the packages of ``LIBRARY_PACKAGES`` in the interpreter's
``purelib`` directory, without tests, vendored copies, data tables, exact copies of
standard-library files or near-copies of held-out ones) to the training side, about 8M more
tokens, so a run of a few thousand steps sees most text once; ``--strip-comments`` removes the
comments (not the docstrings) from every training and validation text. The validation files stay
the held-out standard-library files. A warm start scores its starting weights on the run's own
validation windows first (``init_from.val_this_run``), so a run that changes the corpus options
still has a before / after on the same windows.

Tokenizer: SentencePiece BPE with byte fallback, identity normalisation, no whitespace folding, no
dummy prefix, whitespace-only pieces allowed and ``"\\n"`` as a user-defined piece, so
``decode(encode(text)) == text`` for any text (checked on every validation file). ids 0 unk,
1 bos, 2 eos, 3 pad (the config's ids); files are joined with eos.

Training: float32, [B, S+3] windows drawn uniformly from the training token stream by a seeded
numpy generator, AdamW (betas 0.9/0.95, weight decay 0.1 on matrices only), linear warmup +
cosine decay to 10 %, global-norm gradient clipping 1.0. Every ``--save-every`` steps the state
(``state.pdparams``, ``state.pdopt``, ``state.json`` with the step, the sampler's RNG state and the
log) is written to ``--out``; ``--resume`` continues from it exactly (same losses as an
uninterrupted run). ``--max-minutes`` stops cleanly (saves, exports) before the step budget.
Threads: ``--threads`` sets OMP/MKL and Paddle's CPU thread count (set before Paddle is imported).

Outputs (``--export``, default ``fd_mtp/assets/ernie45_tiny_mtp``): config.json +
model.safetensors (float32 by default, ``--export-dtype bfloat16`` halves it; paddleformers'
layout: ``model.*`` names, ``[out, in]`` linear weights; `fd_mtp.model.loader.load_checkpoint`
reads it back as float32 on CPU),
tokenizer.model + tokenizer_config.json, README.md, train_log.csv, loss_curve.png, train_info.json.
``--export-only --from-state DIR`` exports a snapshot of a running training.

Example (the demo checkpoint's two runs; ``--help`` lists every option)::

    python tools/train_demo_model.py --out runs/demo --export runs/stage1   # the defaults: 1500 steps
    python tools/train_demo_model.py --init-from runs/stage1 --out runs/demo3 \\
        --steps 2200 --lr 1.5e-3 --warmup 100                               # warm start: 2200 more
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

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run from a source checkout without installing
    sys.path.insert(0, str(REPO))
TOOLS = str(Path(__file__).resolve().parent)
if TOOLS not in sys.path:  # tools/demo_train, the script's parts
    sys.path.insert(0, TOOLS)
from demo_train.corpus import (  # noqa: E402
    TOKENIZER_OPTIONS,
    build_tokenizer,
    library_versions,
    load_text,
    tokenize,
)
from demo_train.model import (  # noqa: E402,F401  (batched_forward, unlikelihood: tests)
    batched_forward,
    build_models,
    evaluate,
    losses,
    make_config,
    unlikelihood,
    validation_windows,
)
from demo_train.outputs import (  # noqa: E402,F401  (the _warm_start helpers: tests)
    _steps_option,
    _warm_start_chain,
    _warm_start_note,
    count_params,
    export,
    plot,
    write_log,
)
from demo_train.state import (  # noqa: E402
    STATE_FILES,  # noqa: F401
    checkpoint_tensors,
    draw_batch,
    init_from_checkpoint,
    load_optimizer_state,
    load_params,
    log_row,
    lr_at,
    make_optimizer,
    progress_bar,
    save_state,
    should_stop,
)

from fd_mtp.assets.corpus import (  # noqa: E402
    LIBRARY_FILES_RULE,
    MAX_FILE_BYTES,
    SPLIT_RULE,
    TEST_DIRS,
    TEST_FILES_RULE,
    library_files,
    library_root,
    split_corpus,
    stdlib_root,
)

DEFAULT_EXPORT = REPO / "fd_mtp" / "assets" / "ernie45_tiny_mtp"
FINAL_RESERVE_S = 60  # --max-minutes: seconds kept for the final evaluation, snapshot and export


# --------------------------------------------------------------------------- arguments
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Train the tiny ERNIE-4.5 + MTP demo model on the Python standard library's sources "
        "(CPU, float32) and export it as an fd_mtp checkpoint directory.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("run")
    g.add_argument(
        "--out",
        type=Path,
        default=REPO / "runs" / "demo",
        help="work directory: tokenizer, token cache, state snapshots, log, plot",
    )
    g.add_argument("--export", type=Path, default=DEFAULT_EXPORT, help="final checkpoint directory")
    g.add_argument("--resume", action="store_true", help="continue from the snapshot in --out")
    g.add_argument(
        "--init-from",
        type=Path,
        default=None,
        help="warm start: initial weights and tokenizer from this exported checkpoint directory "
        "(e.g. the shipped demo model) instead of a random init; a new schedule of --steps "
        "(fresh optimizer); the model options must match its config.json",
    )
    g.add_argument(
        "--export-only",
        action="store_true",
        help="no training: export the snapshot of --from-state (default --out) to --export",
    )
    g.add_argument(
        "--from-state", type=Path, default=None, help="snapshot directory for --export-only"
    )
    g.add_argument(
        "--max-minutes",
        type=float,
        default=None,
        help="wall-clock budget of this invocation, from its start: training stops "
        f"{FINAL_RESERVE_S} s before it to leave time for the final evaluation, save and export",
    )
    g.add_argument(
        "--stop-after",
        type=int,
        default=None,
        help="stop cleanly (save + export) after this step, as an interruption would; "
        "--resume continues to --steps (the schedule is that of --steps)",
    )
    g.add_argument("--threads", type=int, default=2, help="CPU threads (OMP / MKL / Paddle)")
    g.add_argument("--seed", type=int, default=1234)
    g.add_argument("--save-every", type=int, default=50, help="snapshot every N steps")
    g.add_argument("--eval-every", type=int, default=50, help="validation every N steps")
    g.add_argument("--eval-windows", type=int, default=24, help="validation windows (fixed)")
    g.add_argument("--no-progress", action="store_true", help="no tqdm bar (log lines instead)")
    g.add_argument(
        "--corpus-dir",
        type=Path,
        default=None,
        help="read *.py files here instead of the standard library (tests)",
    )
    g.add_argument(
        "--with-tests",
        action="store_true",
        help="also train on the standard library's test files (test/, */tests/: "
        "fd_mtp.assets.corpus.test_files); the validation files stay the same",
    )
    g.add_argument(
        "--library-code",
        action="store_true",
        help="also train on the library code of the installed dependencies "
        "(fd_mtp.assets.corpus.library_files: LIBRARY_PACKAGES, no tests, no copies of held-out "
        "files); the validation files stay the same",
    )
    g.add_argument(
        "--strip-comments",
        action="store_true",
        help="remove comments from every training and validation text "
        "(fd_mtp.assets.corpus.strip_comments; docstrings stay)",
    )
    g = p.add_argument_group("optimisation")
    g.add_argument("--steps", type=int, default=1500)
    g.add_argument("--batch-size", type=int, default=8)
    g.add_argument("--seq-len", type=int, default=256)
    g.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    g.add_argument("--min-lr-ratio", type=float, default=0.1, help="final lr / peak lr (cosine)")
    g.add_argument("--warmup", type=int, default=100, help="linear warmup steps")
    g.add_argument("--weight-decay", type=float, default=0.1)
    g.add_argument("--clip", type=float, default=1.0, help="global gradient-norm clip")
    g.add_argument(
        "--mtp-weight", type=float, default=0.5, help="lambda1: MTP step-1 loss (x[t+2])"
    )
    g.add_argument(
        "--mtp2-weight",
        type=float,
        default=0.25,
        help="lambda2: MTP step-2 loss (x[t+3], the block fed its own hidden); 0 disables",
    )
    g.add_argument(
        "--unlikelihood",
        type=float,
        default=0.0,
        metavar="ALPHA",
        help="weight of the main head's token-level unlikelihood term (Welleck et al. 2020: "
        "-log(1 - p) of the window's earlier tokens other than the target); 0 disables",
    )
    g = p.add_argument_group("model")
    g.add_argument("--vocab-size", type=int, default=3072)
    g.add_argument("--hidden-size", type=int, default=256)
    g.add_argument("--intermediate-size", type=int, default=704)
    g.add_argument("--layers", type=int, default=6)
    g.add_argument("--heads", type=int, default=4)
    g.add_argument("--kv-heads", type=int, default=2)
    g.add_argument("--max-position-embeddings", type=int, default=2048)
    g.add_argument("--rope-theta", type=float, default=10000.0)
    g.add_argument(
        "--tokenizer-chars",
        type=int,
        default=3_000_000,
        help="characters of training files the tokenizer is trained on",
    )
    g.add_argument("--export-dtype", default="float32", choices=["bfloat16", "float32"])
    return p


def set_threads(n: int) -> None:
    """Before paddle is imported: OpenMP / MKL pools; after: Paddle's own CPU math threads."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(n)


# --------------------------------------------------------------------------- main
def main(argv=None) -> int:
    t_start = time.time()
    args = build_parser().parse_args(argv)
    set_threads(args.threads)
    import numpy as np
    import paddle

    paddle.set_device("cpu")
    paddle.base.core.set_num_threads(args.threads)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    if args.export_only:
        state_dir = args.from_state or out
        if not (state_dir / "state.json").is_file():
            raise SystemExit(f"{state_dir}: no state.json snapshot to export")
        meta = json.loads((state_dir / "state.json").read_text())
        info = export(args, state_dir, args.export, meta)
        print(json.dumps(info, indent=2))
        return 0

    root = args.corpus_dir or stdlib_root()
    train_files, val_files = split_corpus(root, with_tests=args.with_tests)
    n_std_train = len(train_files)
    if args.library_code:
        lib = library_files(library_root(), stdlib=root)
        print(f"library code: {len(lib)} files from {library_root()}", flush=True)
        train_files = train_files + lib  # after the standard library's (the tokenizer sample)
    strip = args.strip_comments
    tok = build_tokenizer(
        out,
        train_files,
        args.vocab_size,
        args.tokenizer_chars,
        init_from=args.init_from,
        strip=strip,
    )
    train_tokens = tokenize(out, tok, train_files, "train", check_roundtrip=False, strip=strip)
    val_tokens = tokenize(out, tok, val_files, "val", check_roundtrip=True, strip=strip)
    cfg = make_config(args, tok)
    steps_ahead = 2 if args.mtp2_weight > 0 else 1
    win = args.seq_len + 1 + steps_ahead
    if len(train_tokens) <= win:
        raise SystemExit(
            f"training stream has {len(train_tokens)} tokens, fewer than one window ({win})"
        )
    val_windows = validation_windows(val_tokens, args.eval_windows, win)

    paddle.seed(args.seed)
    np.random.seed(args.seed)
    model, mtp = build_models(cfg, args.seed)
    init_record = None
    if args.init_from is not None and not (args.resume and (out / "state.json").is_file()):
        init_record = init_from_checkpoint(args.init_from, cfg, model, mtp)
        # the warm-start weights on this run's validation windows (its corpus options may differ)
        init_record["val_this_run"] = evaluate(
            model, mtp, val_windows, steps_ahead, args.batch_size
        )
        print(
            f"warm start from {args.init_from} (its step {init_record.get('step')}); "
            f"on this run's validation: {init_record['val_this_run']}",
            flush=True,
        )
    opt = make_optimizer(args, model, mtp)
    sampler = np.random.default_rng(args.seed)
    rows: list[dict] = []
    step, elapsed0 = 0, 0.0
    command = " ".join(
        [
            f"OMP_NUM_THREADS={args.threads} MKL_NUM_THREADS={args.threads}",
            "python",
            "tools/train_demo_model.py",
            *(sys.argv[1:] if argv is None else argv),
        ]
    )
    if args.resume and (out / "state.json").is_file():
        meta = json.loads((out / "state.json").read_text())
        load_params(out, model, mtp)
        load_optimizer_state(opt, paddle.load(str(out / "state.pdopt")), model, mtp)
        sampler.bit_generator.state = meta["sampler_state"]
        step, elapsed0, rows = meta["step"], meta["elapsed_s"], meta["log"]
        command = meta["command"]
        init_record = meta.get("init_from")
        print(f"resumed from {out} at step {step}", flush=True)
    elif args.resume:
        print(f"--resume: no snapshot in {out}, starting from step 0", flush=True)

    corpus = {
        "train_files": len(train_files),
        "val_files": len(val_files),
        "train_tokens": int(len(train_tokens)),
        "val_tokens": int(len(val_tokens)),
        "split_rule": SPLIT_RULE,
        "root": str(root),
        "excluded": "site-packages, "
        + ("" if args.with_tests else "test/tests directories (test/, lib2to3/tests, ...), ")
        + f"idlelib/, pydoc_data/, encodings/, files over {MAX_FILE_BYTES // 1000} kB",
    }
    if args.with_tests:
        n_test = sum(1 for r, _ in train_files if TEST_DIRS.intersection(r.split("/")[:-1]))
        corpus["test_files"] = {"train_files": n_test, "rule": TEST_FILES_RULE}
    if args.library_code:
        corpus["library_files"] = {
            "train_files": len(train_files) - n_std_train,
            "root": str(library_root()),
            "packages": library_versions(),
            "rule": LIBRARY_FILES_RULE,
        }
    if strip:
        corpus["strip_comments"] = (
            "comments removed from every training and validation text "
            "(fd_mtp.assets.corpus.strip_comments; docstrings kept)"
        )
    tokenizer = {
        "type": "SentencePiece BPE",
        "vocab_size": tok.vocab_size,
        "options": TOKENIZER_OPTIONS,
        "trained_on_chars": args.tokenizer_chars,
        "chars_per_token_val": round(
            sum(len(load_text(p, strip)) for _, p in val_files) / len(val_tokens), 3
        ),
    }

    def snapshot(finished=False, stopped_early=False):
        meta = {
            "step": step,
            "elapsed_s": elapsed0 + time.time() - t0,
            "sampler_state": sampler.bit_generator.state,
            "log": rows,
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "config": cfg.to_dict(),
            "command": command,
            "python_version": platform.python_version(),
            "corpus": corpus,
            "tokenizer": tokenizer,
            "finished": finished,
            "stopped_early": stopped_early,
            "paddle_version": paddle.__version__,
            "platform": platform.platform(),
            "init_from": init_record,
        }
        save_state(out, model, mtp, opt, meta)
        return meta

    n_params = count_params(checkpoint_tensors(model, mtp))
    print(
        f"corpus: {len(train_files)} train files ({len(train_tokens):,} tokens), {len(val_files)} val files "
        f"({len(val_tokens):,} tokens); vocab {tok.vocab_size}; params {n_params:,}; threads {args.threads}",
        flush=True,
    )
    t0 = time.time()
    deadline = (
        None if args.max_minutes is None else t_start + 60 * args.max_minutes - FINAL_RESERVE_S
    )
    bar = progress_bar(args, step)
    stopped_early = False
    model.train()
    mtp.train()
    while step < args.steps:
        if should_stop(step, args, deadline):
            stopped_early = True
            break
        batch = draw_batch(sampler, train_tokens, win, args.batch_size)
        lr = lr_at(step, args)
        opt.set_lr(lr)
        r = losses(model, mtp, paddle.to_tensor(batch), steps_ahead, ul=args.unlikelihood > 0)
        loss = r["main"] + args.mtp_weight * r["mtp1"]
        if steps_ahead == 2:
            loss = loss + args.mtp2_weight * r["mtp2"]
        if args.unlikelihood > 0:
            loss = loss + args.unlikelihood * r["ul"]
        loss.backward()
        opt.step()
        opt.clear_grad()
        step += 1
        row = {
            "step": step,
            "elapsed_s": round(elapsed0 + time.time() - t0, 2),
            "lr": lr,
            "loss": float(loss),
            "main": float(r["main"]),
            "mtp1": float(r["mtp1"]),
        }
        if steps_ahead == 2:
            row["mtp2"] = float(r["mtp2"])
        if args.unlikelihood > 0:
            row["ul"] = float(r["ul"])
        if not math.isfinite(row["loss"]):
            raise SystemExit(f"step {step}: loss is {row['loss']}")
        if step % args.eval_every == 0 or step == args.steps:
            row.update(evaluate(model, mtp, val_windows, steps_ahead, args.batch_size))
        rows.append(row)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(
                loss=f"{row['loss']:.3f}", main=f"{row['main']:.3f}", mtp=f"{row['mtp1']:.3f}"
            )
        log_row(bar, row, "val_main" in row)
        if step % args.save_every == 0:
            snapshot()
    if bar is not None:
        bar.close()
    if rows and "val_main" not in rows[-1]:
        rows[-1].update(evaluate(model, mtp, val_windows, steps_ahead, args.batch_size))
    meta = snapshot(finished=step >= args.steps, stopped_early=stopped_early)
    write_log(out / "train_log.csv", rows)
    plot(out / "loss_curve.png", rows)
    info = export(args, out, args.export, meta)
    summary = (
        f"done: step {step}/{args.steps}{' (stopped early)' if stopped_early else ''}, "
        f"{info['wall_time_s'] / 60:.1f} min, {info['tokens_seen']:,} tokens; final train "
        f"{info['final_train']}; validation {info['final_val']}; exported to {args.export}"
    )
    print(summary, flush=True)
    (out / "summary.txt").write_text(summary + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
