"""The EAGLE-3 head training's model side (tools/train_eagle_head.py): the frozen target's batched
forward (aux streams and its logits), the head's training-time-test forward over K steps as
inference runs them, the losses, the warm start from the target's MTP block, the draft
vocabulary and the evaluation on held-out windows.

Notation: a window ``w [B, S+K]`` of corpus tokens, K the training-time-test steps. The target
runs once over the whole window (no gradient). Head step k = 1..K at row t = 0..S-1 is what
inference computes at its k-th draft substep when the verified context ends at position t:

* its input token is ``w[t+k]`` (step 1: the token after t; step k: the token of the previous
  draft, which equals the target's when it is accepted), its input hidden state the target's aux
  streams at t fused by ``fc`` (step 1) or the head's own step k-1 output at row t;
* it sits at head position ``t + k - 1`` (RoPE angle) and attends to the step-1 keys / values of
  positions 0..t (the head's KV cache of the verified context), to the keys / values that steps
  2..k-1 wrote at positions t+1..t+k-2, and to its own;
* its label is the target's next-token distribution at position ``t + k``, restricted to the
  draft vocabulary (soft cross-entropy, as EAGLE-3 / SpecForge train); its top-1 agreement is
  whether its argmax, mapped to a target id, equals the target's greedy token there.
"""

from __future__ import annotations

import math

from .model import _expand_kv, _heads, causal_mask, layer_forward


def draft_vocabulary(train_tokens, vocab_size: int, size: int):
    """The ``size`` most frequent token ids of the training stream, sorted (ties: lower id
    first), and the fraction of the stream they cover."""
    import numpy as np

    counts = np.bincount(np.asarray(train_tokens, np.int64), minlength=vocab_size)
    order = np.lexsort((np.arange(vocab_size), -counts))[:size]
    ids = np.sort(order).astype(np.int64)
    return ids, float(counts[ids].sum() / max(counts.sum(), 1))


def make_eagle3_head(target, draft_ids, aux_layers, intermediate_size=None):
    """An EAGLE-3 `EagleHead` over ``target`` with the target's attention shapes, its own MLP
    width (default: the target's), the draft vocabulary ``draft_ids`` (sorted target ids; its
    ``d2t`` set) and ``aux_layers``; the config is checked as a head's config.json is
    (ValueError naming the field)."""
    import numpy as np

    from fd_mtp.model.eagle import EagleHead, EagleHeadConfig

    tcfg = target.config
    d = {
        "model_type": "ernie4_5_eagle3",
        "hidden_size": tcfg.hidden_size,
        "vocab_size": tcfg.vocab_size,
        "intermediate_size": intermediate_size or tcfg.intermediate_size,
        "num_attention_heads": tcfg.num_attention_heads,
        "num_key_value_heads": tcfg.num_key_value_heads,
        "head_dim": tcfg.head_dim,
        "rms_norm_eps": tcfg.rms_norm_eps,
        "rope_theta": tcfg.rope_theta,
        "draft_vocab_size": len(draft_ids),
        "eagle_aux_hidden_state_layer_ids": list(aux_layers),
    }
    head = EagleHead(EagleHeadConfig.from_dict(d, tcfg, "eagle3"), target)
    ids = np.asarray(draft_ids, np.int64)
    head.set_d2t(ids - np.arange(ids.size))
    return head


def target_forward(model, window, aux_layers, draft_ids):
    """The frozen target over ``window [B, L]``: ``(aux [B, L, n*H], greedy [B, L] int64,
    draft_logits [B, L, Vd])``: the streams entering ``aux_layers`` (as
    ``Ernie4_5ForCausalLM.capture_aux_hidden_states`` keeps them), the target's greedy token and
    its logits over the draft vocabulary ``draft_ids`` at every position."""
    import paddle

    from fd_mtp.model.attention import rope_cos_sin

    cfg = model.config
    L = window.shape[1]
    with paddle.no_grad():
        cos, sin = rope_cos_sin(paddle.arange(0, L, dtype="int64"), cfg.head_dim, cfg.rope_theta)
        mask = causal_mask(L)
        x = model.embed_tokens(window)
        streams = {}
        for i, layer in enumerate(model.layers):
            streams[i] = x
            x = layer_forward(layer, x, cos, sin, mask)
        h = model.norm(x)
        logits = model.compute_logits(h.reshape([-1, h.shape[-1]])).reshape([*h.shape[:2], -1])
        greedy = paddle.argmax(logits, axis=-1)
        draft_logits = paddle.index_select(logits, draft_ids, axis=-1)
        aux = paddle.concat([streams[i] for i in aux_layers], axis=-1)
    return aux, greedy, draft_logits


def _later_step_layer(layer, x, cos, sin, kv1, earlier, mask):
    """The head's decoder layer at step k >= 2 (see the module docstring): queries of ``x`` at
    RoPE ``cos``/``sin``, keys / values: ``kv1`` (step 1, causal ``mask``), ``earlier`` (steps
    2..k-1, the same row each) and its own. Returns ``(x, own (k, v))``, both ``[B, Hq, S, D]``."""
    import paddle
    import paddle.nn.functional as F

    from fd_mtp.model.attention import apply_rope_interleaved

    attn = layer.self_attn
    nh, nkv, d = attn.num_heads, attn.num_kv_heads, attn.head_dim
    g = nh // nkv
    h = layer.input_layernorm(x)
    q = apply_rope_interleaved(_heads(attn.q_proj(h), nh, d), cos, sin).transpose([0, 2, 1, 3])
    k = _expand_kv(apply_rope_interleaved(_heads(attn.k_proj(h), nkv, d), cos, sin), g)
    v = _expand_kv(_heads(attn.v_proj(h), nkv, d), g)
    k, v = k.transpose([0, 2, 1, 3]), v.transpose([0, 2, 1, 3])
    scale = 1.0 / math.sqrt(d)
    diag = [*earlier, (k, v)]
    cross = paddle.matmul(q, kv1[0], transpose_y=True) * scale + mask
    own = [(q * kj).sum(axis=-1, keepdim=True) * scale for kj, _ in diag]
    p = F.softmax(paddle.concat([cross, *own], axis=-1), axis=-1)
    s = kv1[0].shape[2]
    o = paddle.matmul(p[..., :s], kv1[1])
    for j, (_, vj) in enumerate(diag):
        o = o + p[..., s + j : s + j + 1] * vj
    o = o.transpose([0, 2, 1, 3]).reshape([x.shape[0], x.shape[1], nh * d])
    x = x + attn.o_proj(o)
    return x + layer.mlp(layer.post_attention_layernorm(x)), (k, v)


def head_forward(head, window, aux, steps: int):
    """The head's K-step training-time-test forward -> ``[K]`` final-normed outputs ``[B, S, H]``
    (``S = window.shape[1] - steps``), each step's row t as the module docstring says."""
    import paddle

    from fd_mtp.model.attention import rope_cos_sin

    cfg = head.config
    s = window.shape[1] - steps
    cos_all, sin_all = rope_cos_sin(
        paddle.arange(0, s + steps, dtype="int64"), cfg.head_dim, cfg.rope_theta
    )
    mask = causal_mask(s)
    layer = head.layers[0]
    outs = []
    prev = head.fc(aux[:, :s])
    kv1, earlier = None, []
    for k in range(1, steps + 1):
        e = head.embed_tokens(window[:, k : s + k])
        x = head.eh_proj(paddle.concat([head.enorm(e), head.hnorm(prev)], axis=-1))
        if k == 1:
            x, kv1 = layer_forward(layer, x, cos_all[:s], sin_all[:s], mask, return_kv=True)
        else:
            cos, sin = cos_all[k - 1 : s + k - 1], sin_all[k - 1 : s + k - 1]
            x, kv = _later_step_layer(layer, x, cos, sin, kv1, earlier, mask)
            earlier.append(kv)
        prev = head.norm(x)
        outs.append(prev)
    return outs


def head_losses(head, target_out, window, draft_ids, steps: int) -> dict:
    """``{"loss_k", "acc_k"}`` for k = 1..K: the soft cross-entropy against the target's
    distribution over the draft vocabulary and the top-1 agreement (mapped draft argmax ==
    target greedy token), means over the ``B * S`` rows; ``"loss"`` their 0.8^(k-1) weighted sum
    (EAGLE-3's step decay). ``target_out``: `target_forward` of ``window``."""
    import paddle
    import paddle.nn.functional as F

    aux, greedy, tlogits = target_out
    s = window.shape[1] - steps
    outs = head_forward(head, window, aux, steps)
    res, total = {}, 0.0
    for k, out in enumerate(outs, start=1):
        logits = paddle.matmul(out, head.lm_head_weight)  # [B, S, Vd]
        soft = F.softmax(tlogits[:, k : s + k], axis=-1)
        loss = -(soft * F.log_softmax(logits, axis=-1)).sum(axis=-1).mean()
        mapped = paddle.index_select(draft_ids, paddle.argmax(logits, axis=-1).reshape([-1]))
        acc = (mapped == greedy[:, k : s + k].reshape([-1])).astype("float32").mean()
        res[f"loss_{k}"], res[f"acc_{k}"] = loss, acc
        total = total + 0.8 ** (k - 1) * loss
    res["loss"] = total
    return res


def mtp_agreement(model, mtp, window, greedy) -> dict:
    """The target's own MTP block on the window's rows, for comparison: ``{"mtp_acc_1",
    "mtp_acc_2"}``, the top-1 agreement of MTP steps 1 and 2 (as inference runs them) with the
    target's greedy token at t+1 / t+2 (rows t < L - 3 of ``window [B, L]``; ``greedy [B, L]``,
    `target_forward`'s)."""
    import paddle

    from .model import batched_forward

    with paddle.no_grad():
        s = window.shape[1] - 3  # batched_forward's rows for two MTP steps
        hid = batched_forward(model, mtp, window, steps=2)
        res = {}
        for k, name in ((1, "mtp1"), (2, "mtp2")):
            h = hid[name]
            pred = paddle.argmax(model.compute_logits(h.reshape([-1, h.shape[-1]])), axis=-1)
            res[f"mtp_acc_{k}"] = float(
                (pred == greedy[:, k : s + k].reshape([-1])).astype("float32").mean()
            )
    return res


def evaluate(head, target, mtp, windows, draft_ids, steps: int, batch: int) -> dict:
    """Validation means over ``windows``: ``val_loss_k``, ``val_acc_k`` (the head) and, with
    ``mtp``, ``val_mtp_acc_1/2`` (the target's MTP block on the same rows)."""
    import paddle

    head.eval()
    tot: dict[str, float] = {}
    n = 0
    with paddle.no_grad():
        for i in range(0, len(windows), batch):
            w = paddle.to_tensor(windows[i : i + batch])
            out = target_forward(target, w, head.aux_layer_ids, draft_ids)
            r = {k: float(v) for k, v in head_losses(head, out, w, draft_ids, steps).items()}
            if mtp is not None and w.shape[1] > 3:
                r.update(mtp_agreement(target, mtp, w, out[1]))
            for k, v in r.items():
                tot[k] = tot.get(k, 0.0) + v * w.shape[0]
            n += w.shape[0]
    head.train()
    return {f"val_{k}": v / n for k, v in tot.items() if k != "loss"}


def warm_start_from_mtp(head, mtp, target, draft_ids) -> None:
    """Initialise the head from the target's MTP block, which has the head's shapes but ``fc``:
    ``enorm``, ``hnorm``, ``eh_proj`` and the decoder layer copied, ``norm`` the target's final
    norm (the MTP block's), ``lm_head`` the target's lm_head columns of the draft vocabulary, and
    ``fc`` passing the last aux stream through the final norm's weight and zero for the others
    (so step 1 starts as the MTP block reading a not-yet-final hidden state)."""
    import numpy as np
    import paddle

    pairs = [
        (head.enorm, mtp.enorm),
        (head.hnorm, mtp.hnorm),
        (head.eh_proj, mtp.eh_proj),
        (head.layers[0], mtp.mtp_block),
    ]
    for dst, src in pairs:
        dst.set_state_dict(src.state_dict())
    head.norm.set_state_dict(target.norm.state_dict())
    lm = target.compute_logits(paddle.eye(head.config.hidden_size, dtype="float32"))  # [H, V]
    head.lm_head_weight.set_value(paddle.index_select(lm, draft_ids, axis=-1))
    h = head.config.hidden_size
    n = len(head.aux_layer_ids)
    fc = np.zeros([n * h, h], np.float32)
    fc[(n - 1) * h :] = np.diag(target.norm.weight.numpy().astype(np.float32))
    head.fc.weight.set_value(paddle.to_tensor(fc))


def random_init(head, seed: int) -> None:
    """N(0, 0.02) matrices (output projections scaled by 1/sqrt(2)), norms 1."""
    import numpy as np
    import paddle

    rng = np.random.default_rng(seed)
    for name, prm in sorted(head.named_parameters()):
        if len(prm.shape) == 1:
            val = np.ones(prm.shape, np.float32)
        else:
            std = 0.02 / (
                math.sqrt(2) if name.endswith(("o_proj.weight", "down_proj.weight")) else 1
            )
            val = (std * rng.standard_normal(prm.shape)).astype(np.float32)
        prm.set_value(paddle.to_tensor(val))
