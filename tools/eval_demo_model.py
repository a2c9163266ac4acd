#!/usr/bin/env python
"""Evaluate a demo checkpoint on held-out standard-library code: what issue 17 item 6 reports.

For a checkpoint directory (default: the shipped demo model) it measures, on held-out files (the
corpus split of ``fd_mtp.assets.corpus``, files the model never trained on):

* held-out cross-entropy and top-1 of the main head and the MTP head, as recorded by the trainer
  in ``train_info.json`` (24 fixed validation windows), also in bits per character so models with
  different tokenizers compare;
* greedy continuations of ``--prompts`` held-out prompts (``--max-tokens`` each): repetition
  measures of the generated text: ``distinct-4`` (distinct token 4-grams / 4-grams; 1 = no repeat),
  ``repeated lines`` (non-blank generated lines equal to an earlier generated line of the same
  continuation), ``comment-only lines`` (non-blank lines made only of ``#`` and spaces: the old
  model's failure) and ``longest run`` (the longest run of one identical line);
* syntax of those continuations: the longest prefix of whole generated lines such that prompt +
  prefix parses as Python (``ast.parse``; a prefix ending in an open block or bracket does not),
  as a share of the generated whole lines (``parsed line share``), and how many of its lines are
  code (not blank, not only a comment) per continuation (``parsed code lines``): runs of comment
  lines parse, so the second figure is the one comment loops cannot inflate;
* the same measures of sampled continuations (temperature 0.7, top_p 0.9, seed 0: what ``make
  demo`` prints beside the greedy one; speculative sampling with MTP K = 3) and their mean
  accepted length;
* the same measures of greedy continuations with FastDeploy's repetition penalty 1.1 (its penalty
  op divides a positive logit of an already generated token by it; MTP K = 3), and their mean
  accepted length;
* greedy continuations of a few English prompts (:data:`ENGLISH_PROMPTS`, ``--max-tokens``
  each; the model saw only Python, so what it makes of prose is a known weak spot: the issue's
  report was a run of ``#`` lines): the repetition measures above;
* MTP acceptance of those greedy continuations (``num_speculative_tokens = 3``, three model
  steps): mean accepted length (tokens per target step, bonus included) and acceptance per draft
  position; the speculative output must equal plain decoding token for token (it is checked).

    python tools/eval_demo_model.py [--model DIR] [--prompts 16] [--max-tokens 128] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from fd_mtp.assets.corpus import parses  # noqa: E402


def repetition(token_ids: list[int], text: str) -> dict:
    grams = [tuple(token_ids[i : i + 4]) for i in range(len(token_ids) - 3)]
    lines = [ln for ln in text.split("\n") if ln.strip()]
    seen, repeated = set(), 0
    for ln in lines:
        repeated += ln in seen
        seen.add(ln)
    run = best = 0
    prev = None
    for ln in lines:
        run = run + 1 if ln == prev else 1
        best, prev = max(best, run), ln
    return {
        "distinct4": len(set(grams)) / len(grams) if grams else 1.0,
        "lines": len(lines),
        "repeated_lines": repeated,
        "comment_only_lines": sum(1 for ln in lines if set(ln.strip()) <= {"#", " "}),
        "longest_run": best,
    }


def syntax(prompt: str, text: str) -> dict:
    """The longest prefix of the whole generated lines (``text`` up to its last newline) that
    parses after ``prompt`` (which ends at a line end): its line count, how many of those are
    code, and the number of whole generated lines."""
    whole = text[: text.rfind("\n") + 1].splitlines(keepends=True) if "\n" in text else []
    best = 0
    for n in range(len(whole), -1, -1):
        if parses(prompt + "".join(whole[:n])):
            best = n
            break
    code = sum(1 for ln in whole[:best] if ln.strip() and not ln.strip().startswith("#"))
    return {"whole_lines": len(whole), "parsed_lines": best, "parsed_code_lines": code}


MTP_K3 = {"method": "mtp", "num_speculative_tokens": 3, "num_model_steps": 3}


def engine(LLM, model: Path, speculative_config):
    return LLM(
        str(model),
        max_num_seqs=4,
        max_model_len=2048,
        block_size=64,
        speculative_config=speculative_config,
    )


#: prose prompts (not Python): what a model trained only on code continues them with
ENGLISH_PROMPTS = (
    "The weather today is",
    "Once upon a time, there was a little",
    "Please write a short summary of the meeting.",
    "My favourite book is",
)
#: the sampled continuations' settings (those ``make demo`` prints)
SAMPLED = {"temperature": 0.7, "top_p": 0.9, "seed": 0}
#: the decoding settings measured beside plain greedy (MTP K = 3 each)
VARIANTS = {
    "sampled": SAMPLED,
    "penalized": {"temperature": 0.0, "repetition_penalty": 1.1},
}


def evaluate(model: Path, prompts: int, max_tokens: int) -> dict:
    from fd_mtp.assets.corpus import held_out_prompts
    from fd_mtp.engine.sampling_params import SamplingParams
    from fd_mtp.llm import LLM

    info = json.loads((model / "train_info.json").read_text())
    val = info["final_val"]
    cpt = info["tokenizer"]["chars_per_token_val"]
    out = {
        "model": str(model),
        "params_main": info["params_main"],
        "params_mtp": info["params_mtp"],
        "tokens_seen": info.get("tokens_seen_total", info["tokens_seen"]),
        "train_minutes": round(info.get("wall_time_s_total", info["wall_time_s"]) / 60, 1),
        "threads": info["threads"],
        "val_main_ce": val["val_main"],
        "val_main_bits_per_char": val["val_main"] / math.log(2) / cpt,
        "val_main_top1": val["val_main_acc"],
        "val_mtp_ce": val["val_mtp1"],
        "val_mtp_top1": val["val_mtp1_acc"],
    }
    texts = [t for _, t in held_out_prompts(prompts, chars=400)]
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    plain = engine(LLM, model, None)
    base = plain.generate(texts, params, use_tqdm=False)
    spec = engine(LLM, model, MTP_K3)
    outs = spec.generate(texts, params, use_tqdm=False)
    if [o.token_ids for o in outs] != [o.token_ids for o in base]:
        raise SystemExit("eval: speculative greedy output differs from plain decoding")
    m = spec.speculative_metrics
    out.update(prompts=len(texts), max_tokens=max_tokens, **measures(texts, base))
    english = plain.generate(list(ENGLISH_PROMPTS), params, use_tqdm=False)
    # prose prompts: repetition only (the prompt is not Python, so no syntax measure)
    out["english"] = dict(prompts=len(english), **repetition_measures(english))
    out.update(
        mean_accepted_length=m.mean_accepted_length,
        acceptance_per_position=m.acceptance_per_position,
    )
    # sampled (speculative sampling) and greedy with a repetition penalty (FastDeploy's penalty
    # op), each with MTP K = 3 on a fresh engine (its own acceptance counters)
    others = {}
    for name, settings in VARIANTS.items():
        llm = engine(LLM, model, MTP_K3)
        got = llm.generate(
            texts,
            SamplingParams(**settings, max_tokens=max_tokens, ignore_eos=True),
            use_tqdm=False,
        )
        others[name] = got
        out[name] = dict(
            settings,
            **measures(texts, got),
            mean_accepted_length=llm.speculative_metrics.mean_accepted_length,
        )
    sampled = others["sampled"]
    out["english_samples"] = [o.text for o in english]
    out["samples"] = [o.text for o in base[:3]]
    out["sampled_samples"] = [o.text for o in sampled[:3]]
    return out


def repetition_measures(outs) -> dict:
    """The repetition measures of the continuations ``outs``, over all of them."""
    reps = [repetition(o.token_ids, o.text) for o in outs]
    lines = sum(r["lines"] for r in reps)
    return dict(
        distinct4=sum(r["distinct4"] for r in reps) / len(reps),
        repeated_line_frac=sum(r["repeated_lines"] for r in reps) / max(lines, 1),
        comment_only_line_frac=sum(r["comment_only_lines"] for r in reps) / max(lines, 1),
        longest_run_mean=sum(r["longest_run"] for r in reps) / len(reps),
    )


def measures(prompts: list[str], outs) -> dict:
    """Repetition and syntax measures of the continuations ``outs`` of ``prompts``."""
    syn = [syntax(t, o.text) for t, o in zip(prompts, outs)]
    whole = sum(x["whole_lines"] for x in syn)
    return dict(
        repetition_measures(outs),
        parsed_line_share=sum(x["parsed_lines"] for x in syn) / max(whole, 1),
        parsed_code_lines_mean=sum(x["parsed_code_lines"] for x in syn) / len(syn),
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, default=None, help="checkpoint (default: the demo model)")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args(argv)
    if args.model is None:
        from fd_mtp.assets import default_model_path

        args.model = Path(default_model_path())
    r = evaluate(args.model, args.prompts, args.max_tokens)
    for k, v in r.items():
        if k in VARIANTS or k == "english":
            for k2, v2 in v.items():
                print(f"{k + ' ' + k2:>36}: {v2}")
        elif not k.endswith("samples"):
            print(f"{k:>36}: {v}")
    for s in r["samples"]:
        print("--- greedy continuation ---\n" + s)
    for s in r["sampled_samples"]:
        print("--- sampled continuation ---\n" + s)
    for prompt, s in zip(ENGLISH_PROMPTS, r["english_samples"]):
        print(f"--- greedy continuation of {prompt!r} ---\n" + s)
    if args.json:
        args.json.write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
