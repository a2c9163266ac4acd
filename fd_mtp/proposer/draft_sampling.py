"""Drafts sampled from the MTP head's distribution (``SpeculativeConfig.draft_sampling``).

`sample_draft_rows` turns the head's penalised, temperature-scaled logits into each row's draft
distribution ``q`` (softmax over the `CANDIDATES` most probable ids, then the request's top-k
and top-p, renormalised; one-hot on the argmax for greedy requests) and draws one token per row
from ``q`` with the row's uniform number (inverse CDF over the candidates by probability). The
verifier (``speculate_verify``'s "rejection" strategy) receives the same ``q`` as
``draft_probs``: accepting a draft ``d`` with probability ``min(1, p(d) / q(d))`` and resampling
rejections from ``max(0, p - q)`` keeps the output distributed exactly as plain sampling from
``p``, whatever ``q`` is, and the closer ``q`` is to ``p`` the more drafts are accepted (a point
mass, the argmax drafter, is accepted with probability ``p(argmax)`` only).

Randomness is an argument (``uniform``), so a test fixes it and expects exact tokens.
"""

from __future__ import annotations

#: the draft distribution is restricted to the head's this-many most probable tokens (a partial
#: top-k instead of sorting the vocabulary, about 10x cheaper on a CPU at V = 3072)
CANDIDATES = 64


def sample_draft_rows(logits, greedy, top_k, top_p, uniform, *, candidates: int = CANDIDATES):
    """Draw one draft per row and return its distribution.

    ``q`` per row: softmax of the logits, restricted to the ``candidates`` most probable ids
    (ties: lower id first), then to the request's top-k, then to the smallest prefix (by
    probability) whose mass reaches top-p (the token crossing it is kept), renormalised; one-hot
    on the argmax for greedy rows. The token is the first kept id (in that order) whose
    cumulative probability exceeds ``uniform * total``.

    Args:
        logits: ``[R, V]`` float32, read: penalties and temperature already applied.
        greedy: ``[R]`` bool: rows of greedy requests (token = argmax, ``q`` one-hot).
        top_k: ``[R]`` int64, 0 = all tokens. top_p: ``[R]`` float32 in (0, 1].
        uniform: ``[R]`` float32 in [0, 1).
        candidates: keyword-only, >= 1: the restriction above (``min(candidates, V)``).

    Returns:
        ``(tokens [R] int64, q [R, V] float32)``: ``q`` rows sum to 1 and ``q[r, tokens[r]] > 0``.

    >>> import paddle
    >>> logits = paddle.to_tensor([[0.0, 1.0, 2.0], [0.0, 1.0, 2.0]])
    >>> tok, q = sample_draft_rows(logits, paddle.to_tensor([True, False]),
    ...     paddle.to_tensor([0, 2]), paddle.to_tensor([1.0, 1.0]), paddle.to_tensor([0.0, 0.99]))
    >>> tok.tolist(), [round(x, 3) for x in q[1].tolist()]
    ([2, 1], [0.0, 0.269, 0.731])
    """
    import paddle

    R, V = logits.shape
    if R == 0:
        return paddle.zeros([0], "int64"), paddle.zeros([0, V], "float32")
    C = max(1, min(int(candidates), V))
    probs = paddle.nn.functional.softmax(logits.astype("float32"), axis=-1)
    sorted_p, order = paddle.topk(probs, C, axis=-1)  # descending; ties: lower id first
    col = paddle.arange(C, dtype="int64").unsqueeze(0)
    k = top_k.reshape([-1, 1]).astype("int64")
    k = paddle.where(k > 0, paddle.minimum(k, paddle.full_like(k, C)), paddle.full_like(k, C))
    exclusive = paddle.cumsum(sorted_p, axis=-1) - sorted_p
    keep = (col < k) & ((exclusive < top_p.reshape([-1, 1]).astype("float32")) | (col == 0))
    kept = paddle.where(keep, sorted_p, paddle.zeros_like(sorted_p))
    kept = kept / paddle.sum(kept, axis=-1, keepdim=True)
    cdf = paddle.cumsum(kept, axis=-1)
    u = uniform.reshape([-1, 1]).astype("float32") * cdf[:, -1:]
    # the first position whose cumulative mass exceeds u, at most the last kept one
    pos = paddle.sum((cdf <= u).astype("int64"), axis=-1, keepdim=True)
    last_kept = paddle.sum(keep.astype("int64"), axis=-1, keepdim=True) - 1
    pos = paddle.minimum(pos, last_kept)
    g = greedy.reshape([-1, 1]).astype("bool")
    # greedy rows: position 0 (the argmax) with all the mass
    pos = paddle.where(g, paddle.zeros_like(pos), pos)
    kept = paddle.where(
        g & (col == 0), paddle.ones_like(kept), paddle.where(g, paddle.zeros_like(kept), kept)
    )
    tokens = paddle.take_along_axis(order, pos, axis=-1).reshape([-1]).astype("int64")
    q = paddle.put_along_axis(paddle.zeros([R, V], "float32"), order, kept, axis=-1)
    return tokens, q
