"""Token sampler of the plain-decoding runner (FastDeploy's ``Sampler`` order, spec §9.1 steps 1-4).

Per logits row: ``fd_mtp.ops.speculate_get_token_penalty_multi_scores`` (min-length EOS mask,
repetition / frequency / presence penalties over the generated tokens in ``pre_ids``, division by
the temperature), optional masking of extra stop token ids while ``min_tokens`` is not reached,
then greedy argmax, or softmax -> top-k -> top-p -> one inverse-CDF draw with a uniform number
from `uniforms` (a counter-based hash of the request's seed and the index of the token being
drawn: reproducible whatever else is in the batch, and after preemption).

Everything but the uniforms and the per-row parameters stays in Paddle tensors, so the same code
runs on CPU and GPU. The per-row parameters (`SamplingRows`) are host arrays; a runner sends them
with its step's one host-to-device transfer (`SamplingRows.arrays` -> `InputBatch.push`) and puts
the device copies in ``rows.device``; without them (direct use, tests) they are converted here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import ops
from .sampling_params import SEED_MODULUS

_MASK64 = (1 << 64) - 1


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser over uint64 arrays (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def uniforms(seeds, counters) -> np.ndarray:
    """Uniform numbers in ``[0, 1)``, one per (seed, counter) pair: a pure function of the pair.

    ``counters`` is the index of the token being drawn (``step_idx`` before the draw).

    >>> u = uniforms([7, 7, 8], [0, 1, 0])
    >>> bool(((0 <= u) & (u < 1)).all()), bool(u[0] == uniforms([7], [0])[0]), bool(u[0] != u[1])
    (True, True, True)
    """
    s = np.asarray(seeds, dtype=np.int64).astype(np.uint64) % np.uint64(SEED_MODULUS)
    c = np.asarray(counters, dtype=np.int64).astype(np.uint64)
    h = _splitmix64(_splitmix64(s) ^ c)
    return (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


@dataclass
class SamplingRows:
    """Host-side parameters of the logits rows of one step (row r = the r-th scheduled slot).

    greedy: [R] bool; top_k: [R] int (0 = off); top_p: [R] float; uniform: [R] float in [0, 1);
    banned: (rows, token ids) pairs whose logits are set to -inf after the penalties (stop token
    ids while ``min_tokens`` is not reached).
    """

    greedy: np.ndarray
    top_k: np.ndarray
    top_p: np.ndarray
    uniform: np.ndarray
    banned_rows: np.ndarray
    banned_ids: np.ndarray
    #: device copies of `arrays` (name -> tensor), set by a runner after its push; None: none yet
    device: dict | None = field(default=None, repr=False)

    def arrays(self) -> dict:
        """The host arrays the sampler needs on the device, in the dtypes it uses: the banned pairs
        when there are any, and for a batch that is not all greedy the greedy mask, top-k, top-p and
        the uniforms (float32, as the draw uses them)."""
        out = {}
        if len(self.banned_rows):
            out["banned_rows"] = np.asarray(self.banned_rows, np.int64)
            out["banned_ids"] = np.asarray(self.banned_ids, np.int64)
        if not bool(np.all(self.greedy)):
            out["greedy"] = np.asarray(self.greedy, bool)
            out["top_k"] = np.asarray(self.top_k, np.int64)
            out["top_p"] = np.asarray(self.top_p).astype(np.float32)
            out["uniform"] = np.asarray(self.uniform).astype(np.float32)
        return out

    def tensor(self, name: str):
        """The device copy of array ``name`` (converted here when the runner did not push it)."""
        if self.device is not None and name in self.device:
            return self.device[name]
        import paddle

        return paddle.to_tensor(self.arrays()[name])


class Sampler:
    """Samples one token per logits row; see the module docstring for the order of operations."""

    def __call__(
        self,
        logits,
        rows: SamplingRows,
        *,
        pre_ids,
        penalty_score,
        frequency_score,
        presence_score,
        temperature,
        bad_tokens,
        step_idx,
        min_dec_len,
        eos_token_id,
        seq_lens_this_time,
        output_padding_offset,
        output_cum_offsets,
        max_seq_len,
    ) -> np.ndarray:
        """Sample.

        Args:
            logits: ``[R, V]`` float32, **written in place** (penalties, temperature, masks).
            rows: the per-row host parameters.
            The keyword tensors are the runner's ``share_inputs`` entries of the same names
            (``[B, 1]`` per slot) and this step's packed offsets, passed to
            ``speculate_get_token_penalty_multi_scores`` as FastDeploy does.

        Returns:
            ``[R]`` int64 numpy array of token ids.
        """
        if logits.shape[0] == 0:
            return np.zeros([0], dtype=np.int64)
        self.apply_penalties(
            logits,
            rows,
            pre_ids=pre_ids,
            penalty_score=penalty_score,
            frequency_score=frequency_score,
            presence_score=presence_score,
            temperature=temperature,
            bad_tokens=bad_tokens,
            step_idx=step_idx,
            min_dec_len=min_dec_len,
            eos_token_id=eos_token_id,
            seq_lens_this_time=seq_lens_this_time,
            output_padding_offset=output_padding_offset,
            output_cum_offsets=output_cum_offsets,
            max_seq_len=max_seq_len,
        )
        return self.sample(logits, rows)

    def apply_penalties(
        self,
        logits,
        rows: SamplingRows,
        *,
        pre_ids,
        penalty_score,
        frequency_score,
        presence_score,
        temperature,
        bad_tokens,
        step_idx,
        min_dec_len,
        eos_token_id,
        seq_lens_this_time,
        output_padding_offset,
        output_cum_offsets,
        max_seq_len,
    ) -> None:
        """The penalty op (min-length EOS mask, repetition / frequency / presence, temperature), then
        the banned (row, id) pairs set to -inf; ``logits`` is written in place."""
        import paddle

        ops.speculate_get_token_penalty_multi_scores(
            pre_ids,
            logits,
            penalty_score,
            frequency_score,
            presence_score,
            temperature,
            bad_tokens,
            step_idx,
            min_dec_len,
            eos_token_id,
            seq_lens_this_time,
            output_padding_offset,
            output_cum_offsets,
            max_seq_len,
        )
        if len(rows.banned_rows):
            idx = [rows.tensor("banned_rows"), rows.tensor("banned_ids")]
            paddle.index_put_(
                logits, idx, paddle.full([len(rows.banned_rows)], float("-inf"), dtype=logits.dtype)
            )

    def _kept(self, logits, rows: SamplingRows):
        """Softmax -> top-k -> top-p over the penalised logits: ``(order, keep, kept)`` where ``order``
        ``[R, V]`` sorts the ids by probability (ties: lower id first), ``keep`` marks the kept
        positions of that order (the most probable token is always kept) and ``kept`` holds their
        probabilities (0 elsewhere)."""
        import paddle

        vocab = logits.shape[1]
        probs = paddle.nn.functional.softmax(logits, axis=-1)
        order = paddle.argsort(probs, axis=-1, descending=True, stable=True)  # ties: lower id first
        sorted_probs = paddle.take_along_axis(probs, order, axis=-1)
        k = rows.tensor("top_k")
        top_k = paddle.where(
            k > 0, paddle.minimum(k, paddle.full_like(k, vocab)), paddle.full_like(k, vocab)
        )
        col = paddle.arange(vocab, dtype="int64").unsqueeze(0)
        exclusive = paddle.cumsum(sorted_probs, axis=-1) - sorted_probs
        top_p = rows.tensor("top_p").unsqueeze(-1)
        # keep the top-k tokens whose preceding mass is below top_p (the token crossing top_p stays);
        # the most probable token is always kept
        keep = (col < top_k.unsqueeze(-1)) & ((exclusive < top_p) | (col == 0))
        return order, keep, paddle.where(keep, sorted_probs, paddle.zeros_like(sorted_probs))

    def sample(self, logits, rows: SamplingRows) -> np.ndarray:
        """One token per row of already penalised ``logits``: argmax for greedy rows, else one
        inverse-CDF draw with ``rows.uniform`` from the top-k / top-p distribution. Returns a
        ``[R]`` int64 numpy array (`sample_tensor` keeps it on the device)."""
        if logits.shape[0] == 0:
            return np.zeros([0], dtype=np.int64)
        return self.sample_tensor(logits, rows).numpy().astype(np.int64)

    def sample_tensor(self, logits, rows: SamplingRows):
        """`sample` as an int64 ``[R]`` device tensor (no host round trip)."""
        import paddle

        if logits.shape[0] == 0:
            return paddle.zeros([0], dtype="int64")
        greedy_tokens = paddle.argmax(logits, axis=-1).astype("int64")
        if bool(rows.greedy.all()):
            return greedy_tokens
        order, keep, kept = self._kept(logits, rows)
        cdf = paddle.cumsum(kept, axis=-1)
        target = rows.tensor("uniform").unsqueeze(-1) * cdf[:, -1:]
        # first kept position whose cdf exceeds the target; never past the last kept token
        pos = paddle.sum((cdf <= target).astype("int64"), axis=-1, keepdim=True)
        last_kept = paddle.sum(keep.astype("int64"), axis=-1, keepdim=True) - 1
        pos = paddle.minimum(pos, last_kept)
        sampled = paddle.take_along_axis(order, pos, axis=-1).squeeze(-1)
        return paddle.where(rows.tensor("greedy"), greedy_tokens, sampled).astype("int64")

    def probs(self, logits, rows: SamplingRows):
        """``[R, V]`` float32: each row's sampling distribution over token ids (what `sample` draws
        from): the renormalised top-k / top-p probabilities, one-hot on the argmax for greedy rows.
        This is the ``target_probs`` of lossless rejection verification."""
        import paddle

        vocab = logits.shape[1]
        onehot = paddle.nn.functional.one_hot(paddle.argmax(logits, axis=-1), vocab).astype(
            "float32"
        )
        if bool(rows.greedy.all()):
            return onehot
        order, _, kept = self._kept(logits, rows)
        kept = kept / paddle.sum(kept, axis=-1, keepdim=True)
        dist = paddle.put_along_axis(paddle.zeros_like(kept), order, kept, axis=-1)
        greedy = rows.tensor("greedy").unsqueeze(-1)
        return paddle.where(greedy, onehot, dist).astype("float32")


@dataclass(frozen=True)
class Logprob:
    """The log-probability of one token at one position (vLLM's ``Logprob``).

    ``logprob``: ``log_softmax`` of the model's raw logits (before penalties, temperature, top-k
    and top-p) at that token; ``rank``: 1 + the number of tokens with a strictly larger
    log-probability (1 = the most likely); ``decoded_token``: the token's text (None without a
    tokenizer)."""

    logprob: float
    rank: int
    decoded_token: str | None = None


def token_logprobs(logits, token_ids, k: int) -> dict:
    """Log-probabilities of ``logits`` rows (``[n, V]`` float32 tensor, the model's raw logits):
    ``log_softmax`` of each row, the value and rank of ``token_ids[r]`` in row r, and the ``k``
    largest values with their token ids (k = 0: none).

    Returns host arrays: ``token`` [n] float32, ``rank`` [n] int64 (1 + the number of tokens with
    a strictly larger log-probability), ``top_ids`` [n, k] int64 and ``top`` [n, k] float32
    (descending; ties in paddle.topk's order).
    """
    import paddle

    n = int(logits.shape[0])
    if n == 0:
        return {
            "token": np.zeros([0], np.float32),
            "rank": np.zeros([0], np.int64),
            "top_ids": np.zeros([0, k], np.int64),
            "top": np.zeros([0, k], np.float32),
        }
    lp = paddle.nn.functional.log_softmax(logits, axis=-1)
    ids = paddle.to_tensor(np.asarray(token_ids, np.int64).reshape(-1, 1), place=lp.place)
    tok = paddle.take_along_axis(lp, ids, axis=1)
    rank = paddle.sum((lp > tok).astype("int64"), axis=1) + 1
    out = {"token": tok.reshape([-1]).numpy(), "rank": rank.numpy().astype(np.int64)}
    if k > 0:
        top, top_ids = paddle.topk(lp, k, axis=-1)
        out["top"], out["top_ids"] = top.numpy(), top_ids.numpy().astype(np.int64)
    else:
        out["top"], out["top_ids"] = np.zeros([n, 0], np.float32), np.zeros([n, 0], np.int64)
    return out


def logprob_entries(lp: dict, token_ids, ks) -> list:
    """One ``{token id: Logprob}`` per row of `token_logprobs`' result ``lp``: the ``ks[r]``
    most likely tokens (ranks 1..ks[r]) and the row's token ``token_ids[r]`` (its own rank)."""
    out = []
    for r, (tid, k) in enumerate(zip(token_ids, ks)):
        entry = {
            int(i): Logprob(float(v), j + 1)
            for j, (i, v) in enumerate(zip(lp["top_ids"][r, :k], lp["top"][r, :k]))
        }
        entry[int(tid)] = Logprob(float(lp["token"][r]), int(lp["rank"][r]))
        out.append(entry)
    return out
