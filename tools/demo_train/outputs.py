"""The demo training's outputs (tools/train_demo_model.py): the log (CSV), the loss-curve plot,
the exported checkpoint directory and its README."""

from __future__ import annotations

import csv
import json
import math
import shlex
from pathlib import Path

from .model import build_models
from .state import checkpoint_tensors, load_params

LOG_FIELDS = [
    "step",
    "elapsed_s",
    "lr",
    "loss",
    "main",
    "mtp1",
    "mtp2",
    "ul",
    "val_main",
    "val_mtp1",
    "val_mtp2",
    "val_main_acc",
    "val_mtp1_acc",
    "val_mtp2_acc",
]


def write_log(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=LOG_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def plot(path: Path, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    train = [r for r in rows if "main" in r]
    for key, label in (
        ("main", "train main CE (x[t+1])"),
        ("mtp1", "train MTP CE (x[t+2])"),
        ("mtp2", "train MTP step-2 CE (x[t+3])"),
    ):
        pts = [(r["step"], r[key]) for r in train if r.get(key) is not None]
        if pts:
            ax.plot(*zip(*pts), lw=0.8, alpha=0.8, label=label)
    for key, label in (("val_main", "val main CE"), ("val_mtp1", "val MTP CE")):
        pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if pts:
            ax.plot(*zip(*pts), "o-", ms=3, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.set_title("ERNIE-4.5 tiny + MTP on the Python standard library")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def count_params(sd: dict) -> int:
    return int(sum(math.prod(v.shape) for v in sd.values()))


def export(args, state_dir: Path, dest: Path, meta: dict) -> dict:
    """Write the checkpoint directory ``dest`` from the snapshot in ``state_dir``."""
    import shutil

    from fd_mtp.model.config import ErnieConfig
    from fd_mtp.model.loader import save_checkpoint

    cfg = ErnieConfig.from_dict(meta["config"])
    model, mtp = build_models(cfg, 0, trainable=False)
    load_params(state_dir, model, mtp)
    sd = checkpoint_tensors(model, mtp)
    dest.mkdir(parents=True, exist_ok=True)
    for stale in dest.glob("model*.safetensors*"):
        stale.unlink()
    save_checkpoint(
        dest,
        cfg,
        sd,
        dtype=None if args.export_dtype == "float32" else args.export_dtype,
        layout="torch",  # the layout paddleformers' from_pretrained loads (fd_mtp loads both)
    )
    for name in ("tokenizer.model", "tokenizer_config.json"):
        shutil.copyfile(state_dir / "tokenizer" / name, dest / name)
    rows = meta["log"]
    write_log(dest / "train_log.csv", rows)
    plot(dest / "loss_curve.png", rows)
    last_val = next((r for r in reversed(rows) if "val_main" in r), {})
    last_train = next((r for r in reversed(rows) if "main" in r), {})
    n_main = count_params(model.state_dict())
    n_mtp = count_params(mtp.state_dict())
    size = sum(f.stat().st_size for f in dest.glob("model*.safetensors"))
    info = {
        "step": meta["step"],
        "steps_planned": meta["args"]["steps"],
        "seed": meta["args"]["seed"],
        "wall_time_s": round(meta["elapsed_s"], 1),
        "threads": meta["args"]["threads"],
        "command": meta["command"],
        "python_version_of_corpus": meta["python_version"],
        "corpus": meta["corpus"],
        "tokenizer": meta["tokenizer"],
        "batch_size": meta["args"]["batch_size"],
        "seq_len": meta["args"]["seq_len"],
        "tokens_seen": meta["step"] * meta["args"]["batch_size"] * meta["args"]["seq_len"],
        "init_from": meta.get("init_from"),
        "lr": meta["args"]["lr"],
        "warmup": meta["args"]["warmup"],
        "mtp_weight": meta["args"]["mtp_weight"],
        "mtp2_weight": meta["args"]["mtp2_weight"],
        "unlikelihood": meta["args"].get("unlikelihood", 0.0),
        "params_main": n_main,
        "params_mtp": n_mtp,
        "weights_dtype": args.export_dtype,
        "weights_bytes": size,
        "final_train": {k: last_train.get(k) for k in ("main", "mtp1", "mtp2")},
        "final_val": {k: v for k, v in last_val.items() if k.startswith("val_")},
        "stopped_early": meta.get("stopped_early", False),
        "finished": meta.get("finished", False),
        "paddle_version": meta.get("paddle_version"),
        "platform": meta.get("platform"),
    }
    prior = info["init_from"] or {}
    info["tokens_seen_total"] = info["tokens_seen"] + (
        prior.get("tokens_seen_total") or prior.get("tokens_seen") or 0
    )
    info["wall_time_s_total"] = round(
        info["wall_time_s"] + (prior.get("wall_time_s_total") or prior.get("wall_time_s") or 0), 1
    )
    (dest / "train_info.json").write_text(json.dumps(info, indent=2) + "\n")
    (dest / "README.md").write_text(readme(cfg, info))
    return info


def _fmt(v, pct=False):
    if v is None:
        return "n/a"
    return f"{100 * v:.1f} %" if pct else f"{v:.3f}"


def _warm_start_chain(info: dict) -> list[dict]:
    """The runs this export was warm-started from, oldest first (each ``init_from`` record nests
    the one before it)."""
    chain, rec = [], info.get("init_from")
    while rec:
        chain.append(rec)
        rec = rec.get("init_from")
    return chain[::-1]


def _steps_option(command: str | None) -> int | None:
    """The ``--steps`` value of a recorded command line (None when absent or unparsable)."""
    try:
        words = shlex.split(command or "")
    except ValueError:
        return None
    for i, word in enumerate(words):
        if word.startswith("--steps="):
            value = word.split("=", 1)[1]
        elif word == "--steps" and i + 1 < len(words):
            value = words[i + 1]
        else:
            continue
        return int(value) if value.isdigit() else None
    return None


def _warm_start_note(info: dict) -> str:
    """README paragraph: every run of the warm-start chain with its command, so the export can be
    reproduced from scratch."""
    chain = _warm_start_chain(info)
    prior = chain[-1]
    pv = prior.get("final_val") or {}
    lines = []
    for i, rec in enumerate(chain, 1):
        wall = rec.get("wall_time_s")
        minutes = f"{wall / 60:.1f} minutes" if wall is not None else "minutes not recorded"
        tokens = rec.get("tokens_seen")
        tokens = f"{tokens:,} tokens" if tokens is not None else "tokens not recorded"
        ce = _fmt((rec.get("final_val") or {}).get("val_main"))
        planned = rec.get("steps_planned") or _steps_option(rec.get("command"))
        stopped = (
            f" (stopped at its time budget: add `--stop-after {rec.get('step')}` without "
            "`--max-minutes` to stop at the same step)"
            if rec.get("stopped_early")
            or (
                planned is not None
                and planned != rec.get("step")
                and "--stop-after" not in (rec.get("command") or "")
            )
            else ""
        )
        lines.append(
            f"{i}. {rec.get('step')} steps{stopped}, {tokens}, {minutes}, held-out main CE {ce}:\n\n"
            f"   ```\n   {rec.get('command')}\n   ```\n"
        )
    return (
        "\nWarm start: this run began from the weights of an earlier export of this model "
        f"(`--init-from`; held-out main CE {_fmt(pv.get('val_main'))}"
        + (
            f"; {_fmt(prior['val_this_run']['val_main'])} on this run's validation windows"
            if prior.get("val_this_run")
            else ""
        )
        + "). The runs before this one, oldest first, each started from the export of the one "
        "before it:\n\n" + "\n".join(lines) + "\n"
        f"In all ({len(chain) + 1} runs): {info['tokens_seen_total']:,} training tokens, "
        f"{info['wall_time_s_total'] / 60:.1f} minutes. The steps, tokens and minutes at the top are "
        "this run's own. To reproduce from scratch, run the commands in order with `--export DIR` "
        "added to each and `--init-from` pointing at the previous run's `DIR`, then this run's "
        "command (above) the same way.\n"
    )


def readme(cfg, info: dict) -> str:
    v, t = info["final_val"], info["final_train"]
    c = info["corpus"]
    tests = c.get("test_files")
    ul_note = (
        f" + {info['unlikelihood']:g} x the main head's token-level unlikelihood of the window's "
        "earlier tokens (Welleck et al. 2020; ul in the log)"
        if info.get("unlikelihood")
        else ""
    )
    tests_note = (
        f" Of the training files, {tests['train_files']} are the standard library's own tests "
        f"({tests['rule']})."
        if tests
        else ""
    )
    lib = c.get("library_files")
    if lib:
        pk = ", ".join(lib["packages"].values()) or "none found"
        tests_note += (
            f" Of the training files, {lib['train_files']} are library code of the project's "
            f"installed dependencies ({pk}; each under its own licence): {lib['rule']}."
        )
    if c.get("strip_comments"):
        tests_note += f" Every text, training and validation, has its comments removed ({c['strip_comments']})."
    stop_note = (
        "\nThe run stopped at its time budget (`--max-minutes`) after step "
        f"{info['step']} of the {info['steps_planned']} planned; on another machine it stops at another "
        f"step: add `--steps {info['steps_planned']} --stop-after {info['step']}` without `--max-minutes` "
        "to stop at the same one.\n"
        if info.get("stopped_early")
        else ""
    )
    prior = info.get("init_from")
    if prior:
        stop_note += _warm_start_note(info)
    stop_note += (
        "\nThe same weights need the same corpus (this Python version's standard library"
        + (", and the library packages at the versions above" if c.get("library_files") else "")
        + "), seed and Paddle build; the loss curve should match closely elsewhere.\n"
    )
    return f"""# ernie45_tiny_mtp: a tiny ERNIE-4.5 with an MTP block, trained on Python code

A dense ERNIE-4.5 ({cfg.num_hidden_layers} decoder layers, hidden {cfg.hidden_size}, intermediate
{cfg.intermediate_size}, {cfg.num_attention_heads} query / {cfg.num_key_value_heads} key-value heads,
head_dim {cfg.head_dim}, interleaved RoPE theta {cfg.rope_theta:g}, tied embeddings, vocabulary
{cfg.vocab_size}) plus one ERNIE MTP block (`num_nextn_predict_layers = 1`), saved as paddleformers
saves ERNIE-4.5 (`config.json`, `model.safetensors` with `model.*` names and `[out, in]` linear
weights, `tokenizer.model`): paddleformers' `from_pretrained` loads it, and so does `fd_mtp`. It exists to
demonstrate MTP speculative decoding on a CPU with `fd_mtp`: the MTP block was trained jointly with
the main model so that its drafts are accepted. It is a toy: it writes plausible-looking Python,
not correct programs.

* Parameters: {info["params_main"]:,} main model + {info["params_mtp"]:,} MTP block; weights stored as
  {info["weights_dtype"]} ({info["weights_bytes"] / 1e6:.1f} MB; `fd_mtp.model.load_checkpoint` loads them as
  float32 on CPU).
* Corpus: the `.py` sources of the Python {info["python_version_of_corpus"]} standard library
  ({c["train_files"]} training files, {c["train_tokens"]:,} tokens; {c["val_files"]} validation files,
  {c["val_tokens"]:,} tokens), licensed under the Python Software Foundation License (PSF-2.0).
  Left out: {c["excluded"]}. Validation split: `{c["split_rule"]}`.{tests_note}
* Tokenizer: SentencePiece BPE, {cfg.vocab_size} pieces, byte fallback, identity normalisation (whitespace
  and newlines round-trip exactly); ids 0 `<unk>`, 1 `<s>`, 2 `</s>` (eos, also between files), 3 `<pad>`.
* Training: {info["step"]} steps of {info["batch_size"]} x {info["seq_len"]} tokens ({info["tokens_seen"]:,} tokens),
  AdamW, peak lr {info["lr"]:g}, {info["warmup"]} warmup steps, cosine decay, float32, seed {info["seed"]},
  {info["threads"]} CPU thread(s), {info["wall_time_s"] / 60:.1f} minutes.
  Loss = CE(x[t+1]) + {info["mtp_weight"]:g} CE_MTP(x[t+2]) + {info["mtp2_weight"]:g} CE_MTP-step-2(x[t+3]) (the
  MTP block applied a second time to its own output hidden state, as with `num_model_steps > 1`){ul_note}.
* Final training losses (nats/token): main {_fmt(t.get("main"))}, MTP {_fmt(t.get("mtp1"))},
  MTP step 2 {_fmt(t.get("mtp2"))}.
* Validation (held-out stdlib files): main CE {_fmt(v.get("val_main"))} (top-1 {_fmt(v.get("val_main_acc"), True)}),
  MTP CE {_fmt(v.get("val_mtp1"))} (top-1 of x[t+2] {_fmt(v.get("val_mtp1_acc"), True)}),
  MTP step 2 CE {_fmt(v.get("val_mtp2"))} (top-1 of x[t+3] {_fmt(v.get("val_mtp2_acc"), True)}).

Files: `train_log.csv` (per-step losses, periodic validation), `loss_curve.png`, `train_info.json`.

Reproduce (from the repository root; `--help` lists the options):

```
{info["command"]}
```
{stop_note}"""
