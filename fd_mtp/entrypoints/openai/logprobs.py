"""OpenAI's ``logprobs`` shapes of the engine's log-probability entries.

An entry is one ``{token id: Logprob}`` dict (`fd_mtp.RequestOutput.logprobs` /
``prompt_logprobs``): the most likely tokens at a position and the token that is there, each with
its log-probability, its rank and its text (``decoded_token``, the token decoded alone). A prompt's
first token has no entry (nothing predicts it): ``None``, as vLLM's ``prompt_logprobs[0]``.

* completions (``logprobs`` k): ``{tokens, token_logprobs, top_logprobs, text_offset}``;
  ``top_logprobs[i]`` is ``{text: logprob}`` of the k most likely tokens and the token itself,
  most likely first; ``text_offset`` the running sum of the token texts' lengths; a token without
  an entry has ``None`` in ``token_logprobs`` and ``top_logprobs`` (``echo``'s first prompt token);
* chat (``logprobs: true``, ``top_logprobs`` k): ``{"content": [{token, logprob, bytes,
  top_logprobs: [{token, logprob, bytes}]}]}``.

-inf becomes -9999.0 (OpenAI's value: JSON has no infinity).
"""

from __future__ import annotations

__all__ = ["Echo", "chat_logprobs", "completion_logprobs", "concat_completion_logprobs"]


def _finite(x: float) -> float:
    """A log-probability JSON can carry: -inf as OpenAI's -9999.0."""
    return max(float(x), -9999.0)


def _token_text(token_id: int, lp) -> str:
    """A token's text in logprobs: the engine's ``decoded_token`` (the token decoded alone), or
    ``token_id:N`` without a tokenizer (vLLM's spelling)."""
    return lp.decoded_token if lp.decoded_token is not None else f"token_id:{token_id}"


def _by_rank(entry: dict) -> list:
    return sorted(entry.items(), key=lambda kv: kv[1].rank)


def completion_logprobs(token_ids, entries, offset: int, decode=None) -> tuple[dict, int]:
    """OpenAI's completions ``logprobs`` of some tokens, their text offsets counted from
    ``offset``. ``entries[i]`` may be None (no entry for that token): its text is then
    ``decode(token id)`` (``token_id:N`` without ``decode``) and its log-probabilities None.
    Returns the dict and the offset after the last token."""
    tokens, token_lps, tops, offsets = [], [], [], []
    for tid, entry in zip(token_ids, entries):
        if entry is None:
            text = decode(tid) if decode is not None else f"token_id:{tid}"
            token_lps.append(None)
            tops.append(None)
        else:
            lp = entry[tid]
            text = _token_text(tid, lp)
            token_lps.append(_finite(lp.logprob))
            tops.append({_token_text(t, v): _finite(v.logprob) for t, v in _by_rank(entry)})
        tokens.append(text)
        offsets.append(offset)
        offset += len(text)
    return {
        "tokens": tokens,
        "token_logprobs": token_lps,
        "top_logprobs": tops,
        "text_offset": offsets,
    }, offset


def concat_completion_logprobs(first: dict, second: dict) -> dict:
    """Two completions ``logprobs`` dicts one after the other (echo: the prompt's, then the
    generated tokens')."""
    return {key: first[key] + second[key] for key in first}


def chat_logprobs(token_ids, entries, top: int) -> dict:
    """OpenAI's chat ``logprobs``: ``{"content": [{token, logprob, bytes, top_logprobs}]}``,
    ``bytes`` the UTF-8 bytes of the token's text, ``top_logprobs`` the ``top`` most likely tokens
    (most likely first)."""

    def item(tid, lp):
        text = _token_text(tid, lp)
        return {"token": text, "logprob": _finite(lp.logprob), "bytes": list(text.encode())}

    content = []
    for tid, entry in zip(token_ids, entries):
        c = item(tid, entry[tid])
        c["top_logprobs"] = [item(t, v) for t, v in _by_rank(entry)[:top]]
        content.append(c)
    return {"content": content}


_EMPTY = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}


class Echo:
    """``echo`` of one completions request: each prompt's text (a text prompt as sent, a token-id
    prompt decoded) before its choices' text and, with ``logprobs``, its tokens' entries (the
    first token's None) before theirs. Streamed, both go with a choice's first chunk (a prompt's
    entries are known once its prefill ran).

    Args:
        tokenizer: the server's tokenizer (decodes token-id prompts and entry-less tokens).
        prompts: the request's prompts (text or token ids).
        n: choices per prompt (choice i shows prompt i // n).
    """

    def __init__(self, tokenizer, prompts: list, n: int):
        self.tokenizer = tokenizer
        self.prompts = prompts
        self.texts = [p if isinstance(p, str) else None for p in prompts]
        self.n = n
        self.sent: set[int] = set()

    async def decode_prompts(self, offload) -> None:
        """Decode the token-id prompts with ``offload`` (the front's thread pool)."""
        for k, p in enumerate(self.prompts):
            if self.texts[k] is None:
                self.texts[k] = await offload(self.tokenizer.decode, list(p))

    def text(self, choice: int) -> str:
        return self.texts[choice // self.n]

    def first_chunk(self, choice: int) -> bool:
        """True once per choice: its first chunk carries the prompt."""
        if choice in self.sent:
            return False
        self.sent.add(choice)
        return True

    def logprobs(self, prompt_ids, entries, offset: int) -> tuple[dict, int]:
        """The prompt tokens' completions logprobs from ``offset`` (``prompt_ids`` None: the
        request ended before its prefill ran, no entries) and the offset after them."""
        if prompt_ids is None:
            return {key: [] for key in _EMPTY}, offset
        decode = self.tokenizer.decode
        return completion_logprobs(prompt_ids, entries, offset, lambda t: decode([t]))

    @staticmethod
    def join(head: dict | None, tail: dict | None) -> dict | None:
        """The prompt's logprobs (None: not asked) followed by the tokens' (None: none)."""
        if head is None:
            return tail
        return concat_completion_logprobs(head, tail if tail is not None else _EMPTY)
