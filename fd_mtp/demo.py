"""A readable walk-through of one MTP draft step on a small batch.

Runs the six draft-side ops of fd_mtp in the order MTPProposer calls them (spec §4.1 step 7)
on three requests, and prints what each op read and wrote:

* request 0 has just been prefilled by the target (prompt of 4 tokens, first token sampled),
* request 1 is decoding: the target verified [t, d1, d2] and accepted 2 tokens,
* request 2 is an empty slot (stopped).

The draft model itself is a stand-in (its "argmax" is a fixed function of the last input
token), since the demo model arrives with a later release; every number the ops produce is
real. Run with ``python -m fd_mtp.demo`` (or ``make demo``).
"""
from __future__ import annotations

import numpy as np

K = 2  # num_speculative_tokens
STEPS = 2  # num_model_steps
L = 16  # max_model_len
VOCAB = 100
H = 4  # hidden size


def _show(title: str, before: dict, after: dict) -> None:
    print(f"  {title}")
    for name, old in before.items():
        new = after[name]
        mark = "  (written)" if not np.array_equal(old, new) else ""
        head = f"    {name:<32} "
        print(head + np.array2string(new, separator=" ", prefix=head, max_line_width=120) + mark)


def _snapshot(tensors: dict) -> dict:
    return {k: v.numpy().copy() for k, v in tensors.items()}


def _draft_argmax(tokens: np.ndarray) -> np.ndarray:
    """Stand-in for MTP forward + lm_head + argmax: a fixed function of the input token."""
    return (tokens * 7 + 3) % VOCAB


def _output_layout(this_time: np.ndarray, enc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Output rows per request and output_cum_offsets, as pre_process computes them (§5.2-5.3)."""
    rows = np.where(this_time == 0, 0, np.where((this_time == 1) | (enc != 0), 1, this_time))
    cum = np.concatenate([[0], np.cumsum(L - rows)[:-1]]).astype(np.int32)
    return rows.astype(np.int32), cum


def main() -> None:
    import warnings

    warnings.filterwarnings("ignore", message="No ccache found")  # paddle's build-tool notice
    import paddle

    import fd_mtp.ops as ops

    paddle.set_device("cpu")
    t = lambda a, dt: paddle.to_tensor(np.asarray(a), dtype=dt)  # noqa: E731

    # ---- target state after its step (what speculate_update left) ----
    target = {
        "accept_tokens": t([[41, 0, 0], [17, 23, 0], [0, 0, 0]], "int64"),
        "accept_num": t([1, 2, 0], "int32"),
        "seq_lens_this_time": t([4, 3, 0], "int32"),  # target rows this step
        "seq_lens_encoder": t([0, 0, 0], "int32"),
        "seq_lens_decoder": t([4, 9, 0], "int32"),
        "step_idx": t([1, 5, 0], "int64"),
        "stop_flags": t([False, False, True], "bool"),
        "is_block_step": t([False, False, False], "bool"),
        "draft_tokens": t([[41, 0, 0], [23, 5, 6], [0, 0, 0]], "int64"),
    }
    # ---- proposer (MTP) state ----
    prompt = [11, 12, 13, 14]
    input_ids = np.zeros((3, L), np.int64)
    input_ids[0, :3] = prompt[1:]  # draft prompt = target prompt shifted left by one
    draft = {
        "draft_tokens": t(np.full((3, K + 1), -1), "int64"),
        "input_ids": t(input_ids, "int64"),
        "stop_flags": t([False, False, True], "bool"),
        "seq_lens_this_time": t([4, 1, 0], "int32"),
        "seq_lens_encoder": t([4, 0, 0], "int32"),
        "seq_lens_decoder": t([0, 8, 0], "int32"),
        "step_idx": t([0, 4, 0], "int64"),
        "not_need_stop": paddle.to_tensor([False], place=paddle.CPUPlace()),
        "is_block_step": t([False] * 3, "bool"),
        "batch_drop": t([False] * 3, "bool"),
        "pre_ids": t(np.full((3, L), -1), "int64"),
        "mask_rollback": t([0, 0, 0], "int32"),
        "recompute_token_num": t([STEPS - 1] * 3, "int32"),
    }
    max_dec_len = t([12, 12, 12], "int64")
    end_ids = t([2], "int64")
    rng = np.random.default_rng(0)
    target_hidden = t(rng.standard_normal((7, H)).round(2), "float32")  # 4 + 3 target rows

    print(f"fd_mtp demo: one MTP draft step, K={K}, num_model_steps={STEPS}, batch of 3\n")

    print("1. draft_model_preprocess: target results -> draft inputs")
    watched = {**draft, "target.draft_tokens": target["draft_tokens"]}
    before = _snapshot(watched)
    ops.draft_model_preprocess(
        draft["draft_tokens"], draft["input_ids"], draft["stop_flags"],
        draft["seq_lens_this_time"], draft["seq_lens_encoder"], draft["seq_lens_decoder"],
        draft["step_idx"], draft["not_need_stop"], draft["is_block_step"], draft["batch_drop"],
        draft["pre_ids"], draft["mask_rollback"], draft["recompute_token_num"],
        target["accept_tokens"], target["accept_num"], target["seq_lens_this_time"],
        target["seq_lens_encoder"], target["seq_lens_decoder"], target["step_idx"],
        target["stop_flags"], target["is_block_step"], target["draft_tokens"],
        STEPS, True, False, True,
    )
    _show("read accept_tokens/accept_num and the target's lengths; now:", before, _snapshot(watched))

    print("\n2. eagle_get_hidden_states: pick the target hidden rows the draft pairs with its tokens")
    hidden = ops.eagle_get_hidden_states(
        target_hidden, draft["seq_lens_this_time"], draft["seq_lens_encoder"],
        draft["seq_lens_decoder"], draft["stop_flags"], target["accept_num"],
        target["seq_lens_this_time"], target["seq_lens_encoder"], STEPS,
    )
    print(f"    target rows {list(target_hidden.shape)} -> draft rows {list(hidden.shape)}:")
    print("    " + np.array2string(hidden.numpy(), prefix="    "))

    for substep in range(STEPS):
        if not bool(draft["not_need_stop"].numpy()[0]):
            break
        this_time = draft["seq_lens_this_time"].numpy().reshape(-1)
        enc = draft["seq_lens_encoder"].numpy().reshape(-1)
        rows, cum = _output_layout(this_time, enc)
        # The draft's last input token per output row (stand-in for the forward pass).
        ids, dtok = draft["input_ids"].numpy(), draft["draft_tokens"].numpy()
        last_inputs = []
        for b in range(3):
            if rows[b] == 0:
                continue
            if enc[b] > 0:
                last_inputs.append(ids[b, enc[b] - 1])
            else:
                last_inputs.extend(dtok[b, : this_time[b]])
        next_tokens = t(_draft_argmax(np.asarray(last_inputs, np.int64)), "int64")
        print(f"\n3.{substep} substep {substep}: draft forward (stand-in) sampled {next_tokens.numpy()}")
        print("    draft_model_update: record the drafts")
        last_this_time = draft["seq_lens_this_time"].clone()
        watched = {k: draft[k] for k in ("draft_tokens", "pre_ids", "seq_lens_this_time",
                                         "seq_lens_encoder", "seq_lens_decoder", "step_idx",
                                         "stop_flags", "not_need_stop")}
        watched["target.draft_tokens"] = target["draft_tokens"]
        before = _snapshot(watched)
        ops.draft_model_update(
            next_tokens, draft["draft_tokens"], draft["pre_ids"], draft["seq_lens_this_time"],
            draft["seq_lens_encoder"], draft["seq_lens_decoder"], draft["step_idx"],
            t(cum, "int32"), draft["stop_flags"], draft["not_need_stop"], max_dec_len, end_ids,
            target["draft_tokens"], L, substep, prefill_one_step_stop=False,
        )
        _show("now:", before, _snapshot(watched))
        if substep < STEPS - 1:
            # The draft's own hidden rows (stand-in values: one per output row).
            own = t(rng.standard_normal((int(rows.sum()), H)).round(2), "float32")
            hidden = ops.eagle_get_self_hidden_states(
                own, last_this_time, draft["seq_lens_this_time"], draft["step_idx"]
            )
            print(f"    eagle_get_self_hidden_states: {list(own.shape)} -> {list(hidden.shape)} "
                  "(each running request's last row)")

    print("\n4. draft_model_postprocess: how many tokens the target verifies next step")
    watched = {"target.seq_lens_this_time": target["seq_lens_this_time"]}
    before = _snapshot(watched)
    ops.draft_model_postprocess(
        target["draft_tokens"], target["seq_lens_this_time"], target["seq_lens_encoder"],
        target["stop_flags"],
    )
    _show("target draft rows " + np.array2string(target["draft_tokens"].numpy().reshape(-1)) +
          " ->", before, _snapshot(watched))

    print("\n5. mtp_step_paddle (v0 scheduler): the draft's decode KV blocks")
    blocks = {
        "block_tables": t([[0, 1, -1, -1], [2, 3, 4, -1], [5, 6, -1, -1]], "int32"),
        "encoder_block_lens": t([1, 2, 1], "int32"),
        "used_list_len": t([1, 1, 1], "int32"),
        "free_list": t([9, 8, 7, 0, 0, 0], "int32"),
        "free_list_len": t([3], "int32"),
    }
    before = _snapshot(blocks)
    ops.mtp_step_paddle(
        target["stop_flags"], draft["stop_flags"], draft["batch_drop"],
        draft["seq_lens_this_time"], draft["seq_lens_encoder"], draft["seq_lens_decoder"],
        blocks["block_tables"], blocks["encoder_block_lens"], blocks["used_list_len"],
        blocks["free_list"], blocks["free_list_len"], 4, K,
    )
    _show("block size 4: request 2 (stopped) returns its block; requests that reach a new "
          "block get one:", before, _snapshot(blocks))
    print("\nDone: the target now verifies", target["seq_lens_this_time"].numpy().tolist(),
          "tokens per request.")


if __name__ == "__main__":
    main()
