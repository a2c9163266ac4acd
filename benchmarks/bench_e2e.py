"""End-to-end decoding throughput of fd_mtp's engine (``fd_mtp.LLM``): plain decoding vs MTP speculative
decoding, side by side in one run.

Modes (``--modes``, comma-separated; default all):

* ``plain``: no speculation,
* ``mtp_k1``, ``mtp_k2``, ``mtp_k3``: MTP with K = num_model_steps = 1, 2, 3,
* ``hybrid_k3``: K = 3 with one MTP substep (num_model_steps = 1), the other drafts from n-gram
  matches (``mtp_strategy="with_ngram"``),
* ``adaptive``: K <= 3 chosen per step and per request (``draft_policy="adaptive"``),
* ``adaptive_ds``: ``adaptive`` with drafts sampled from the MTP head (``draft_sampling=True``,
  rejection verification on the draft probabilities); sampled workloads only.

Workloads (``--workloads``, comma-separated; default all four): ``greedy-heldout``,
``sampled-heldout``, ``greedy-repeat`` and ``sampled-repeat``: greedy decoding or sampling
(temperature 0.8, top_p 0.9, seeded; speculative modes verify with ``--sampled-verification``,
default "rejection"), on the held-out prompts below or on repetitive text (each prompt's first
quarter repeated four times). Every (workload, batch, mode) gets a fresh LLM; after one warm-up
generate each, the timed repeats go round-robin over the modes (a machine whose load drifts
slows every mode alike). The table gives
each mode's speed against plain decoding and, for ``adaptive*``, against the best fixed K
(``mtp_k1..3``) of the same workload and batch, and lists where adaptive falls below 0.98x plain
or 0.95x the best fixed K.

For each batch size B (``--batches``) and mode: an LLM with ``max_num_seqs = B``, B random prompts of
``--prompt-len`` tokens (a trained checkpoint with a tokenizer: openings of held-out standard-library
files of about 4 x ``--prompt-len`` characters; or the lines of ``--prompts FILE``, cycled, when the checkpoint has a
tokenizer), greedy decoding of ``--max-tokens`` tokens each (EOS ignored, so every request runs to
the end; greedy workloads verify with ``--verification``, default "greedy"). One warm-up generate,
then ``--repeats`` timed ones; per (mode, batch) the CSV holds p50 / p20 / p80 over the repeats of

* ``tokens_per_s`` [tokens/s]: generated tokens / wall time of ``generate`` (prefill included),
* ``step_latency`` [ms]: wall time / engine steps, ``steps`` [steps]: engine steps per generate,
* ``mean_accepted_length`` [tokens/step]: emitted tokens per request decode step (1 = plain),
* ``acceptance_pos{i}`` [fraction]: accepted / drafted at draft position i (speculative modes),
* ``proposer_host_ms_per_step`` [ms]: the proposer's own time per call outside MTP forwards
  (``ProposerStats.host / calls``; for the n-gram part of hybrid mode, all of it is host time),
* the cost split of the decode steps (`fd_mtp.engine.engine.StepStats`, steps where every
  running request decodes): ``t_step`` [ms] per step, ``t_target`` [ms] (the runner's
  ``execute_model`` minus the proposer: the target forward feeding 1 + K tokens per request,
  sampling, verification, the step's ops and transfers), ``t_draft`` [ms] per MTP substep,
  ``substeps`` per step, ``t_host`` [ms] (the rest: scheduling, stop checks, output delivery,
  the proposer's bookkeeping).

The table prints beside each mode's measured speed-up over plain decoding the speed-up its
measured costs allow, ``pred = E[L] x T1 / (T_target(K+1) + S x T_draft + T_host)`` (E[L]: the
mean accepted length; T1: plain decoding's decode step at the same batch; S: MTP substeps per
step, K for mtp_kK), all from the same run; the two differ by the prefill steps and the
batch's tail (requests finishing at different steps), which the measured figure includes.
After each workload's table, for every speculative mode, the batches where speculation pays
and where it stops paying, with the reason in units of T1: ``E[L]`` against the verify step
``T_target(K+1)/T1`` (it grows with the tokens the target verifies), the drafts ``S T_draft/T1``
and the host ``T_host/T1``.

The checkpoint: ``--model DIR`` (e.g. a trained one such as ``fd_mtp/assets/ernie45_tiny_mtp``), or
by default a temporary ``fd_mtp.testing.write_exact_draft_checkpoint(context=0.3)``: a *synthetic*
MTP head whose drafts are right about half the time by construction, so its acceptance figures say
nothing about a trained model; they only exercise the machinery at a realistic-looking rate.

``--check`` asserts, before timing, that every mode's greedy output at every batch (greedy
workloads) equals plain decoding at batch 1 token for token (so: speculation does not change greedy output, nor does
batching), reporting the first differing position.

Usage:
    python benchmarks/bench_e2e.py [--modes plain,mtp_k1,...,adaptive] [--batches 1,8,32]
        [--workloads greedy-heldout,sampled-heldout,greedy-repeat,sampled-repeat]
        [--model DIR] [--quick] [--check] [--device cpu] [--threads N] [--forward native]
        [--out DIR]

``--threads N`` (default 1, paddle's own CPU default): paddle's CPU math threads
(``paddle.base.core.set_num_threads``) and the native forward's kernel threads
(``LLM(cpu_threads=N)``); the table header states them with ``OMP_NUM_THREADS`` and
``MKL_NUM_THREADS`` as set in the environment. ``--forward`` (default ``native``): the model's
forward, ``LLM(forward=...)``.

``--quick`` (smoke tests): 1 repeat, 16 new tokens, batches 1 and 8 unless given.

Writes DIR/bench_e2e.csv (bench_ops.py's columns: kernel,provider,metric,unit,x,p50,p20,p80,config,
device,timestamp,version; kernel = ``e2e_decoding/<workload>``, provider = the mode, x = the
batch size), DIR/bench_e2e.png (tokens/s and mean accepted length per batch and mode, first
workload) and DIR/bench_e2e_<workload>.png for the others, and prints the tables.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, Path(__file__).resolve().parent):  # fd_mtp; harness.py (also when loaded by path)
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from e2e_report import UNITS, plot, shortfalls, table, where_it_pays  # noqa: E402
from harness import percentiles, row, timestamp, write_csv  # noqa: E402

import fd_mtp  # noqa: E402
from fd_mtp.demo import MODES  # noqa: E402  mode -> speculative_config (verification added from --verification)

BLOCK_SIZE = 64
ADAPTIVE = {"method": "mtp", "num_speculative_tokens": 3, "num_model_steps": 3}
BENCH_MODES = {
    **MODES,
    "adaptive": {**ADAPTIVE, "draft_policy": "adaptive"},
    "adaptive_ds": {
        **ADAPTIVE,
        "draft_policy": "adaptive",
        "draft_sampling": True,
        "verification": "rejection",
    },
}
WORKLOADS = ("greedy-heldout", "sampled-heldout", "greedy-repeat", "sampled-repeat")


def _snapshot(llm):
    """Cumulative counters of ``llm``: engine steps, draft metrics, proposer stats, the decode
    steps' cost split."""
    m, s = llm.speculative_metrics, llm.proposer_stats
    return dict(
        stats=dataclasses.replace(llm.engine.stats),
        steps=llm.engine.num_steps,
        spec_steps=m.num_steps if m is not None else 0,
        emitted=m.num_emitted if m is not None else 0,
        drafted=list(m.drafted_per_position) if m is not None else [],
        accepted=list(m.accepted_per_position) if m is not None else [],
        calls=s.calls if s is not None else 0,
        host=s.host if s is not None else 0.0,
    )


def run_once(llm, prompts, params):
    """One ``generate``: outputs and this call's figures (deltas of the LLM's cumulative counters)."""
    before = _snapshot(llm)
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - t0
    after = _snapshot(llm)
    tokens = sum(len(o.token_ids) for o in outs)
    steps = after["steps"] - before["steps"]
    fig = {
        "tokens_per_s": tokens / elapsed,
        "step_latency": 1e3 * elapsed / max(steps, 1),
        "steps": steps,
    }
    st = after["stats"].since(before["stats"])
    fig.update(
        t_step=1e3 * st.step,
        t_target=1e3 * st.target,
        t_draft=1e3 * st.draft,
        substeps=st.substeps / st.steps if st.steps else np.nan,
        t_host=1e3 * st.host,
    )
    if llm.speculative_config is not None:
        spec_steps = after["spec_steps"] - before["spec_steps"]
        fig["mean_accepted_length"] = (
            (after["emitted"] - before["emitted"]) / spec_steps if spec_steps else np.nan
        )
        for i, (d1, d0, a1, a0) in enumerate(
            zip(after["drafted"], before["drafted"], after["accepted"], before["accepted"])
        ):
            fig[f"acceptance_pos{i}"] = (a1 - a0) / (d1 - d0) if d1 > d0 else np.nan
        calls = after["calls"] - before["calls"]
        fig["proposer_host_ms_per_step"] = (
            1e3 * (after["host"] - before["host"]) / calls if calls else np.nan
        )
    else:
        fig["mean_accepted_length"] = 1.0
    return outs, fig


def first_difference(got: list[int], want: list[int]) -> str:
    n = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    return (
        f"first difference at token {n} of {len(want)}: got {got[n : n + 4]}, want {want[n : n + 4]}"
        f" (lengths {len(got)} / {len(want)})"
    )


def repetitive(prompt: list[int]) -> list[int]:
    """A repetitive-text prompt: the first quarter of ``prompt`` (at least 2 tokens) four times."""
    head = prompt[: max(2, len(prompt) // 4)]
    return head * 4


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--modes",
        default=",".join(BENCH_MODES),
        help=f"comma-separated, from {', '.join(BENCH_MODES)}",
    )
    p.add_argument("--batches", default=None, help="comma-separated (default 1,8,32)")
    p.add_argument(
        "--workloads",
        default=",".join(WORKLOADS),
        help=f"comma-separated, from {', '.join(WORKLOADS)}",
    )
    p.add_argument(
        "--sampled-verification",
        default="rejection",
        help="SpeculativeConfig.verification of speculative modes in sampled workloads",
    )
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument(
        "--prompts", default=None, help="file of text prompts, one a line (needs a tokenizer)"
    )
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--quick", action="store_true", help="1 repeat, 16 new tokens, batches 1,8 (smoke runs)"
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="assert every mode's greedy output at every batch == plain decoding at batch 1",
    )
    p.add_argument(
        "--verification",
        default="greedy",
        help="SpeculativeConfig.verification of speculative modes",
    )
    p.add_argument(
        "--model",
        "--checkpoint",
        dest="model",
        default=None,
        help="checkpoint directory (default: a temporary synthetic exact-draft checkpoint)",
    )
    p.add_argument(
        "--context",
        type=float,
        default=0.3,
        help="write_exact_draft_checkpoint's context of the synthetic checkpoint (0: drafts always right)",
    )
    p.add_argument(
        "--hidden", type=int, default=None, help="synthetic checkpoint: hidden size (default: tiny)"
    )
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--vocab", type=int, default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="paddle's CPU math threads and the native kernel's (LLM(cpu_threads); paddle's "
        "default is 1)",
    )
    p.add_argument(
        "--forward",
        default="native",
        choices=["native", "eager", "static"],
        help="the model's forward (LLM(forward=...); default native)",
    )
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="output directory")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.max_tokens = 1, min(args.max_tokens, 16)
        args.batches = args.batches or "1,8"
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in BENCH_MODES]
    if unknown or not modes:
        p.error(f"--modes: unknown {unknown}; choose from {list(BENCH_MODES)}")
    workloads = [w for w in args.workloads.split(",") if w]
    bad = [w for w in workloads if w not in WORKLOADS]
    if bad or not workloads:
        p.error(f"--workloads: unknown {bad}; choose from {list(WORKLOADS)}")
    batches = [int(b) for b in (args.batches or "1,8,32").split(",") if b]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import paddle

    if args.threads < 1:
        p.error(f"--threads must be >= 1, got {args.threads}")
    paddle.base.core.set_num_threads(args.threads)
    threads = (
        f"forward: {args.forward}; threads: paddle and the native kernel {args.threads} "
        "(LLM(cpu_threads)), OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS', 'unset')}, MKL_NUM_THREADS="
        f"{os.environ.get('MKL_NUM_THREADS', 'unset')}, {os.cpu_count()} CPUs"
    )
    print(threads, flush=True)

    synthetic = args.model is None
    if synthetic:
        from fd_mtp.testing import write_exact_draft_checkpoint

        overrides = {
            k: v
            for k, v in (
                ("hidden_size", args.hidden),
                ("num_hidden_layers", args.layers),
                ("vocab_size", args.vocab),
            )
            if v is not None
        }
        if args.hidden is not None:
            overrides["intermediate_size"] = 2 * args.hidden
        ckpt = write_exact_draft_checkpoint(
            tempfile.mkdtemp(prefix="fd_mtp_bench_"), seed=0, context=args.context, **overrides
        )
        note = (
            f"NOTE: synthetic MTP head (fd_mtp.testing.write_exact_draft_checkpoint, context={args.context}): "
            "acceptance figures are properties of this construction, not of a trained model; "
            "pass --model DIR for a real checkpoint."
        )
    else:
        ckpt = Path(args.model)
        note = f"checkpoint: {ckpt}"
    print(note, flush=True)

    def make_llm(mode, batch, max_model_len, sampled=False):
        spec = BENCH_MODES[mode]
        verification = args.sampled_verification if sampled else args.verification
        if spec is not None and not spec.get("draft_sampling"):
            spec = {**spec, "verification": verification}
        return fd_mtp.LLM(
            str(ckpt),
            device=args.device,
            max_num_seqs=batch,
            max_model_len=max_model_len,
            block_size=BLOCK_SIZE,
            speculative_config=spec,
            cpu_threads=args.threads,
            forward=args.forward,
        )

    probe = make_llm("plain", 1, 2)  # for the config and tokenizer
    cfg = probe.model.config
    rng = np.random.default_rng(0)
    if args.prompts:
        if probe.tokenizer is None:
            p.error("--prompts needs a checkpoint with a tokenizer")
        texts = [t for t in Path(args.prompts).read_text().splitlines() if t.strip()]
        encoded = [probe.tokenizer.encode(t) for t in texts]
        all_prompts = [encoded[i % len(encoded)] for i in range(max(batches))]
        prompt_desc = f"prompts={Path(args.prompts).name} ({min(map(len, encoded))}-{max(map(len, encoded))} tokens)"
    elif probe.tokenizer is not None and not synthetic:
        # a trained checkpoint with a tokenizer: openings of held-out standard-library files (text the
        # demo model was not trained on), cycled when the batch is larger than the held-out set
        from fd_mtp.assets.corpus import held_out_prompts

        held = held_out_prompts(max(batches), chars=4 * args.prompt_len)
        encoded = [probe.tokenizer.encode(t) for _, t in held]
        all_prompts = [encoded[i % len(encoded)] for i in range(max(batches))]
        prompt_desc = (
            f"{len(held)} held-out stdlib files ({min(map(len, encoded))}-{max(map(len, encoded))} "
            "tokens)"
        )
    else:
        all_prompts = [
            rng.integers(3, cfg.vocab_size, size=args.prompt_len).tolist()
            for _ in range(max(batches))
        ]
        prompt_desc = f"prompt={args.prompt_len} random tokens"
    del probe
    max_model_len = max(map(len, all_prompts)) + args.max_tokens + 1
    prompt_sets = {"heldout": all_prompts, "repeat": [repetitive(pr) for pr in all_prompts]}
    config = (
        f"{'synthetic exact-draft head context=' + str(args.context) if synthetic else ckpt.name}: "
        f"hidden={cfg.hidden_size} layers={cfg.num_hidden_layers} heads={cfg.num_attention_heads}/"
        f"{cfg.num_key_value_heads} vocab={cfg.vocab_size} {prompt_desc} new_tokens={args.max_tokens} "
        f"greedy verification={args.verification} sampled verification="
        f"{args.sampled_verification} block_size={BLOCK_SIZE} threads={args.threads}"
    )
    stamp = timestamp()

    rows = []
    per_workload = {}
    for workload in workloads:
        sampled = workload.startswith("sampled")
        prompt_set = prompt_sets[workload.split("-")[1]]
        greedy = fd_mtp.SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)
        params = (
            [
                fd_mtp.SamplingParams(
                    temperature=0.8,
                    top_p=0.9,
                    seed=1000 + i,
                    max_tokens=args.max_tokens,
                    ignore_eos=True,
                )
                for i in range(len(prompt_set))
            ]
            if sampled
            else greedy
        )
        reference: list[list[int]] = []
        if args.check and not sampled:
            one = make_llm("plain", 1, max_model_len)
            reference = [
                one.generate([pr], greedy, use_tqdm=False)[0].token_ids for pr in prompt_set
            ]
            del one
        wrows = []
        wmodes = [m for m in modes if sampled or m != "adaptive_ds"]
        for batch in batches:
            prompts = prompt_set[:batch]
            ps = params[:batch] if sampled else params
            llms = {}
            for mode in wmodes:
                llm = llms[mode] = make_llm(mode, batch, max_model_len, sampled)
                outs, _ = run_once(llm, prompts, ps)  # warm-up
                for i, o in enumerate(outs if reference else []):
                    if o.token_ids != reference[i]:
                        raise AssertionError(
                            f"--check: mode {mode}, batch {batch}, request {i}: output differs from "
                            f"plain decoding at batch 1; {first_difference(o.token_ids, reference[i])}"
                        )
            # repeats round-robin over the modes: a machine whose load drifts slows every mode alike
            figs = {mode: [] for mode in wmodes}
            for _ in range(args.repeats):
                for mode in wmodes:
                    figs[mode].append(run_once(llms[mode], prompts, ps)[1])
            for mode in wmodes:
                for metric in figs[mode][0]:
                    unit = "fraction" if metric.startswith("acceptance_pos") else UNITS[metric]
                    wrows.append(
                        row(
                            f"e2e_decoding/{workload}",
                            mode,
                            batch,
                            [f[metric] for f in figs[mode]],
                            metric=metric,
                            unit=unit,
                            config=config,
                            device=args.device,
                            stamp=stamp,
                        )
                    )
                med = {m: percentiles([f[m] for f in figs[mode]])[0] for m in figs[mode][0]}
                policy = getattr(llms[mode].runner, "draft_policy", None)
                chosen = (
                    f"   {policy.metrics.summary()}"
                    if policy is not None and policy.adaptive
                    else ""
                )
                print(
                    f"{workload:<15} batch {batch:>4} {mode:<11}: {med['tokens_per_s']:10.1f} tokens/s   "
                    f"{med['step_latency']:8.2f} ms/step   accepted length "
                    f"{med['mean_accepted_length']:.2f}{chosen}",
                    flush=True,
                )
            del llms
        rows += wrows
        per_workload[workload] = (wrows, wmodes)

    csv_path = write_csv(rows, out / "bench_e2e.csv", digits=4)
    png_path = out / "bench_e2e.png"
    for i, (workload, (wrows, wmodes)) in enumerate(per_workload.items()):
        plot(
            wrows,
            wmodes,
            batches,
            png_path if i == 0 else out / f"bench_e2e_{workload}.png",
            synthetic,
            BENCH_MODES,
        )
        print(f"\n== {workload} ==")
        print(table(wrows, wmodes, batches, threads))
        for line in shortfalls(wrows, wmodes, batches):
            print(f"  below goal: {line}")
        for line in where_it_pays(wrows, wmodes, batches):
            print(f"  where speculation pays: {line}")
    print(f"\n{config}\n{note}")
    print(
        f"check: {'passed (every mode == plain decoding at batch 1, token for token)' if args.check else 'not run'};"
        f" wrote {csv_path} and {png_path}"
    )


if __name__ == "__main__":
    main()
