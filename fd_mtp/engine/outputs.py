"""The output side of `fd_mtp.engine.engine.LLMEngine`'s step (`EngineOutputs`, mixed into it): a
step's sampled tokens settled on whole-batch arrays, stop checks (EOS, stop token ids after
min_tokens, max_tokens / max_model_len, stop strings; the ops' stops with
``stop_handling="ops"``), finished requests, incremental text and the per-request
`StreamDelta`s."""

from __future__ import annotations

import itertools
import time
from operator import attrgetter

import numpy as np

from .detokenizer import IncrementalDetokenizer
from .request import Request, RequestStatus, StreamDelta, with_decoded_tokens
from .runner import StepOutput

_REASONS = (None, "stop", "length")  # finish-reason codes of the vectorized stop checks
_REASON_ARRAY = np.array(_REASONS, object)
_NO_HIT = np.iinfo(np.int64).max
_OUTPUT_IDS = attrgetter("output_token_ids")
_REQUEST_ID = attrgetter("request_id")


class EngineOutputs:
    """`LLMEngine`'s step results and stop checks; reads the engine's ``ib``, ``runner``,
    ``tokenizer``, ``speculative``, ``ops_stop``, ``stream_text`` and ``_eos``."""

    def _finish_step(self, out: StepOutput, decode_only: bool = False) -> list[StreamDelta]:
        """The step's results on whole-batch arrays: caches advanced, prefill chunks settled,
        stop checks (EOS, stop token ids after min_tokens, max_tokens / max_model_len; the ops'
        stops with ``stop_handling="ops"``), then the per-request output delivery.
        ``decode_only``: every slot that ran decoded (`_schedule_fast`'s steps)."""
        ib = self.ib
        now = time.perf_counter()
        slots, counts, flat = out.slots, out.counts, out.tokens
        starts = counts.cumsum() - counts
        if decode_only:
            ib.num_computed[slots] += counts
            if self.speculative:
                self._count_drafts(slots, out.drafted, counts)
            rows = ib.arrival[slots].argsort(kind="stable")  # arrival order
        else:
            counts, rows = self._settle_prefills(out, now)
            if not rows.size:
                return []
        s, c, st = slots[rows], counts[rows], starts[rows]
        one = flat.size == slots.size  # one token per slot (plain decoding, or no draft accepted)
        if one:
            j, off = np.zeros(rows.size, np.int64), None
            tok, sr = flat[st], s
        else:
            off = c.cumsum() - c  # each row's first token among the emitted ones
            j = np.arange(int(c.sum())) - off.repeat(c)  # position inside the row's run
            tok = flat[st.repeat(c) + j]
            sr = s.repeat(c)
        if self.ops_stop:
            keep, code, by_id = self._ops_stop_codes(out.stopped[rows], s, c)
        else:
            keep, code, by_id = self._host_stop_codes(tok, sr, j, c, off, one)
        return self._deliver(out, rows, (s, c, st), keep, code, by_id, now)

    def _settle_prefills(self, out: StepOutput, now: float):
        """A step with prefill chunks: decodes advance; a prefill chunk's slot has computed up to
        its chunk's end and emits its token only on the final chunk. Returns the emitted counts
        per slot and the rows (into ``out.slots``) that emit, in arrival order."""
        ib = self.ib
        slots = out.slots
        counts = out.counts.copy()
        pre = ~ib.prefilled[slots]
        dec = ~pre
        ib.num_computed[slots[dec]] += counts[dec]
        if self.speculative and dec.any():
            self._count_drafts(slots[dec], out.drafted[dec], counts[dec])
        if pre.any():
            ps = slots[pre]
            ib.num_computed[ps] = ib.end[ps]
            final = ib.end[ps] >= ib.prompt_len[ps] + ib.num_output[ps]
            counts[pre] = np.where(final, np.minimum(counts[pre], 1), 0)
            ib.prefilled[ps[final]] = True
            for b, f in zip(ps.tolist(), final.tolist()):  # per prefill chunk (an event)
                req = ib.requests[b]
                req.num_computed = int(ib.num_computed[b])
                if f:
                    req.prefilled = True
                    if req.metrics.first_token_time is None:
                        req.metrics.first_token_time = now
        rows = (counts > 0).nonzero()[0]  # slots that emit (not a non-final prefill chunk)
        return counts, rows[ib.arrival[slots[rows]].argsort(kind="stable")]  # arrival order

    def _ops_stop_codes(self, stopped, s, c):
        """stop_handling "ops": every emitted token is kept; a row the ops stopped ends with
        "length" at its limit, else "stop". -> (keep, reason codes, stopped by id)."""
        ib = self.ib
        total = ib.num_output[s] + c
        limit = ib.max_output[s]
        late = ~stopped & (total >= limit)
        if late.any():
            req = ib.requests[int(s[late][0])]
            raise RuntimeError(
                f"request {req.request_id!r}: {int(total[late][0])} tokens, the limit is "
                f"{int(limit[late][0])} and the ops did not stop it (stop_handling='ops': "
                "speculate_verify stops at max_dec_len)"
            )
        code = np.where(stopped, np.where(total >= limit, 2, 1), 0)
        return c, code, np.zeros(s.size, bool)

    def _host_stop_codes(self, tok, sr, j, c, off, one: bool):
        """The host's stop checks on every emitted token ``tok`` (slot ``sr``, position ``j`` in
        its row's run ``off``): EOS / stop ids after min_tokens, max_tokens / max_model_len; a
        row keeps its tokens up to its first hit. -> (keep, reason codes, stopped by id)."""
        ib = self.ib
        n = ib.num_output[sr] + j + 1  # output length once the token is appended
        is_eos = np.logical_or.reduce(tok[:, None] == self._eos, axis=1)
        stop_hit = (n >= ib.min_tokens[sr]) & (
            (is_eos & ~ib.ignore_eos[sr])
            | np.logical_or.reduce(ib.stop_ids[sr] == tok[:, None], axis=1)
        )
        hit = stop_hit | (n >= ib.max_output[sr])
        if one:
            return c, np.where(hit, np.where(stop_hit, 1, 2), 0), stop_hit
        # each row's first hit (c if none): the minimum over its run
        first = np.minimum(np.minimum.reduceat(np.where(hit, j, _NO_HIT), off), c)
        ended = first < c
        keep = np.where(ended, first + 1, c)
        by_id = ended & stop_hit[off + np.minimum(first, c - 1)]
        return keep, np.where(ended, np.where(by_id, 1, 2), 0), by_id

    def _deliver(self, out: StepOutput, rows, run, keep, code, by_id, now):
        """Output delivery (per request, in C-level loops): stop strings (per token), tokens,
        logprobs, then finished requests, then the deltas. ``run``: each emitting row's slot,
        emitted count and first token in ``out.tokens``."""
        ib = self.ib
        s, c, st = run
        flat = out.tokens
        slow = ib.has_stop_str[s] if self.tokenizer is not None else None
        any_slow = slow is not None and bool(slow.any())
        if any_slow:
            keep, code = keep.copy(), code.copy()
            for i in slow.nonzero()[0].tolist():  # requests with stop strings: per token
                keep[i], code[i] = self._stop_strings(
                    ib.requests[int(s[i])],
                    flat[st[i] : st[i] + c[i]].tolist(),
                    bool(out.stopped[rows[i]]),
                )
            fast = ~slow
            ib.num_output[s[fast]] += keep[fast]
        else:
            ib.num_output[s] += keep
        reqs = ib.requests[s].tolist()
        toks = list(map(flat.tolist().__getitem__, map(slice, st.tolist(), (st + keep).tolist())))
        if any_slow:
            reqs_f = ib.requests[s[fast]].tolist()
            toks_f = [toks[i] for i in fast.nonzero()[0].tolist()]
            computed = ib.num_computed[s[fast]].tolist()
        else:
            reqs_f, toks_f, computed = reqs, toks, ib.num_computed[s].tolist()
        list(map(list.extend, map(_OUTPUT_IDS, reqs_f), toks_f))
        list(map(setattr, reqs_f, itertools.repeat("num_computed"), computed))
        if self.runner.last_logprobs:
            self._deliver_logprobs(s, keep)
        for i in code.nonzero()[0].tolist():  # finished requests
            req = reqs[i]
            self._release(req)
            self._finish(req, _REASONS[code[i]], now)
        if self.tokenizer is None:
            return list(
                map(
                    StreamDelta,
                    map(_REQUEST_ID, reqs),
                    itertools.repeat(-1),
                    toks,
                    itertools.repeat(""),
                    (code > 0).tolist(),
                    _REASON_ARRAY[code].tolist(),
                )
            )
        # detokenizing: requests with a tokenizer (per request: the text is the output), every
        # request when the text streams, else the finished ones
        todo = ~slow if any_slow else np.ones(len(reqs), bool)
        if not self.stream_text:
            todo &= code > 0
        for i in todo.nonzero()[0].tolist():
            self._update_text(reqs[i], drop_last=bool(by_id[i]))
        return [self._delta(q, t) for q, t in zip(reqs, toks)]

    def _stop_strings(self, req: Request, tokens: list[int], stopped: bool):
        """A request with stop strings: its step's tokens appended one by one with the host's
        checks after each (the text is searched); returns ``(tokens kept, reason code)``."""
        reason = None
        kept = 0
        for token in tokens:
            req.output_token_ids.append(token)
            kept += 1
            reason = self._check_host_stop(req) if self.ops_stop else self._check_stop(req, token)
            if reason is not None:
                break  # tokens a speculative step emitted past the stop are dropped
        if reason is None and self.ops_stop:
            reason = self._ops_stop_reason(req, stopped)
        req.num_computed = int(self.ib.num_computed[req.slot])
        self.ib.num_output[req.slot] = len(req.output_token_ids)
        return kept, _REASONS.index(reason)

    def _deliver_logprobs(self, s: np.ndarray, keep: np.ndarray) -> None:
        """``RequestOutput.logprobs`` of the requests that asked (the runner's ``last_logprobs``)."""
        kept = dict(zip(s.tolist(), keep.tolist()))
        for b, entries in self.runner.last_logprobs.items():
            req = self.ib.requests[b]
            if b in kept and req is not None and req.logprobs is not None:
                req.logprobs += [with_decoded_tokens(e, self.tokenizer) for e in entries[: kept[b]]]

    def _deliver_prompt_logprobs(self) -> None:
        """``RequestOutput.prompt_logprobs`` from the runner's ``last_prompt_logprobs`` (a chunk
        computed again after a preemption changes nothing)."""
        for b, (first, entries) in self.runner.last_prompt_logprobs.items():
            req = self.ib.requests[b]
            if req is None or req.prompt_logprobs is None:
                continue
            for i, e in enumerate(entries, first):
                if req.prompt_logprobs[i] is None:
                    req.prompt_logprobs[i] = with_decoded_tokens(e, self.tokenizer)

    def _ops_stop_reason(self, req: Request, stopped: bool) -> str | None:
        """stop_handling "ops": the finish reason of a request after its step's tokens. The ops
        ended it (``stopped``): "length" when it has its limit of tokens, min(max_tokens,
        max_model_len - prompt length), the last one being the EOS id verify writes there (as
        FastDeploy's serving layer: "length" iff the token count is max_tokens), else "stop".
        RuntimeError when the ops let a request run past its limit (they must not)."""
        limit = min(
            req.sampling_params.max_tokens, self.runner.max_model_len - len(req.prompt_token_ids)
        )
        n = len(req.output_token_ids)
        if stopped:
            return "length" if n >= limit else "stop"
        if n >= limit:
            raise RuntimeError(
                f"request {req.request_id!r}: {n} tokens, the limit is {limit} and the ops did "
                "not stop it (stop_handling='ops': speculate_verify stops at max_dec_len)"
            )
        return None

    def _check_host_stop(self, req: Request) -> str | None:
        """stop_handling "ops": what the host still checks after each token, stop strings
        (the ops compare token ids only)."""
        p = req.sampling_params
        if self.tokenizer is not None:
            self._update_text(req)
            if p.stop_list and len(req.output_token_ids) >= p.min_tokens:
                cut = self._find_stop(req)
                if cut is not None:
                    req.text = req.text[:cut]
                    return "stop"
        return None

    def _check_stop(self, req: Request, token: int) -> str | None:
        p = req.sampling_params
        n = len(req.output_token_ids)
        if n >= p.min_tokens:
            if not p.ignore_eos and token in self.runner.eos_token_ids:
                return "stop"
            if token in p.stop_token_ids:
                return "stop"
        if self.tokenizer is not None:
            self._update_text(req)
            if p.stop_list and n >= p.min_tokens:
                cut = self._find_stop(req)
                if cut is not None:
                    req.text = req.text[:cut]
                    return "stop"
        if n >= p.max_tokens or req.num_tokens >= self.runner.max_model_len:
            return "length"
        return None

    def _update_text(self, req: Request, drop_last: bool = False) -> None:
        """``req.text`` = the decode of the output (a final EOS left out; ``drop_last``: the final
        token left out, a stop by EOS or stop token id), incrementally."""
        ids = req.output_token_ids
        n = len(ids)
        if drop_last or (
            ids and ids[-1] in self.runner.eos_token_ids and not req.sampling_params.ignore_eos
        ):
            n -= 1
        if req.detokenizer is None:
            req.detokenizer = IncrementalDetokenizer(
                self.tokenizer, req.sampling_params.skip_special_tokens
            )
        req.text = req.detokenizer.update(ids, n)

    def _find_stop(self, req: Request) -> int | None:
        """Where to cut ``req.text`` for the earliest stop string it contains (search from just
        before the already streamed text), or None."""
        p = req.sampling_params
        start = max(0, req.text_sent - max(len(s) for s in p.stop_list))
        best = None
        for s in p.stop_list:
            i = req.text.find(s, start)
            if i >= 0:
                cut = i + len(s) if p.include_stop_str_in_output else i
                best = cut if best is None else min(best, cut)
        return best

    def _finish(self, req: Request, reason: str, now: float | None = None) -> None:
        req.status = RequestStatus.FINISHED
        req.finish_reason = reason
        req.metrics.finished_time = time.perf_counter() if now is None else now

    def _delta(self, req: Request, new_ids: list[int]) -> StreamDelta:
        req.tokens_sent = len(req.output_token_ids)
        text_end = len(req.text)
        if not req.finished:
            # hold back what a stop string might still claim, and a trailing partial character
            hold = max((len(s) - 1 for s in req.sampling_params.stop_list), default=0)
            text_end = max(req.text_sent, text_end - hold)
            while text_end > req.text_sent and req.text[text_end - 1] == "\ufffd":
                text_end -= 1
        new_text = req.text[req.text_sent : text_end]
        req.text_sent = text_end
        return StreamDelta(req.request_id, -1, new_ids, new_text, req.finished, req.finish_reason)
