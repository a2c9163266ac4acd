"""Copying a ``{name: array}`` mapping into :class:`~fd_mtp.model.ernie.Ernie4_5ForCausalLM` or
:class:`~fd_mtp.model.ernie.Ernie4_5MTP` (:func:`load_weights`; fd_mtp.model.loader reads
checkpoint directories with it).

Accepted tensor names and layouts
---------------------------------
* **Paddle layout** (the contract; paddleformers' ``ernie.``-prefixed ERNIE-4.5 checkpoints, what
  FastDeploy reads): the names of :func:`fd_mtp.model.ernie.state_dict_names`, linear weights
  ``[in, out]``, ``lm_head.weight`` ``[H, V]``.
* **Hugging-Face / torch layout** (the ``-PT`` checkpoints; paddleformers >= 1.0 uses
  ``base_model_prefix = "model"`` and its ``_gen_aoa_config`` maps ``model.<x>.weight^T ->
  <x>.weight``): the prefix ``model.`` instead of ``ernie.`` (``lm_head.weight`` unchanged), linear
  weights ``[out, in]`` (q/k/v/o, gate/up/down of MLPs, experts and shared experts, the MoE router
  ``mlp.gate.weight``, ``mtp_linear_proj.0.weight``, ``lm_head.weight``). Embeddings, norms, biases
  and ``mlp.moe_statics.e_score_correction_bias`` ``[1, E]`` are the same in both layouts.
* **Fused projections** (FastDeploy's / paddleformers' Paddle-format checkpoints store them fused):
  ``self_attn.qkv_proj.{weight,bias}`` = ``[q | k | v]`` along the output axis (widths
  ``Hq*D, Hkv*D, Hkv*D``, paddleformers' ``gqa_qkv_split_func``), and ``up_gate_proj.{weight,bias}``
  of an MLP / expert / shared expert = ``[gate | up]`` (``is_naive_2fuse``, FastDeploy's SwiGLU on
  ``[gate | up]``). They are split on load.

Which way a linear weight is turned: the shape decides whenever it can (a stored ``[out, in]`` of a
non-square weight is transposed, spec §10 for ``mtp_linear_proj``); a square weight follows the
checkpoint's layout: ``layout="auto"`` means torch when any name starts with ``model.``, Paddle
otherwise (or pass ``layout="paddle"`` / ``"torch"``).

Decisions
---------
* Missing tensor, wrong shape (neither ``[in, out]`` nor ``[out, in]``), two stored tensors for one
  parameter: ``ValueError`` naming the tensor (and the expected and stored shapes). Everything is
  checked before any parameter is written: on error the module is unchanged.
* Unexpected tensors (belonging to neither the main model nor the MTP block): ``ValueError`` listing
  them when ``strict=True`` (default), a ``UserWarning`` listing them when ``strict=False``. Ignored
  silently: the other module's weights (``load_weights(main, ...)`` skips ``ernie.mtp_*``, MTP skips
  the main model's), MTP weights when the config has ``num_nextn_predict_layers == 0``,
  ``*.rotary_emb.inv_freq`` buffers, and ``lm_head.weight`` of a tied model (as FastDeploy and
  paddleformers do; a ``UserWarning`` if it differs from the transposed embedding).
* ``e_score_correction_bias`` stored as ``[E]`` is accepted for ``[1, E]``.
* Values may be numpy arrays or Paddle tensors (any dtype; cast to the parameter's dtype).
* Tied embeddings (``tie_word_embeddings``): the lm_head reads ``ernie.embed_tokens.weight``; no
  ``lm_head.weight`` is needed.
* dtypes: values are cast to each parameter's dtype (the model's ``config.dtype``; the MoE router and
  correction bias stay float32 as upstream). BF16 tensors are read exactly (upcast to float32 numpy,
  cast back by Paddle). ``load_checkpoint(dtype=None)`` builds float32 models when Paddle runs on the
  CPU even if ``config.json`` says bfloat16 (no half-precision matmul on Paddle's CPU build).
* ``e_score_correction_bias`` exists only when the config has ``moe_use_aux_free`` (default True,
  as paddleformers, which does not write the key); a checkpoint carrying it while the config sets
  the flag false is refused by name **even with** ``strict=False``: dropping the bias changes the
  expert choice (issue 17: logits off by up to 18.6, argmax agreement 70%). Missing tensors are
  always refused by name, ``strict`` or not.
* A tqdm progress bar over the tensors is shown for checkpoints over 256 MiB (``progress=None``), or
  as asked with ``progress=True/False``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .config import ErnieConfig
from .safetensors_io import _as_numpy, _nbytes_of, _shape_of

PROGRESS_BYTES = 256 << 20  # progress bar above this checkpoint size (progress=None)
_MAX_LISTED = 12
_IGNORED = re.compile(r"(^|\.)rotary_emb\.inv_freq$")


@dataclass(frozen=True)
class _Source:
    """Where a parameter's value comes from: stored tensor ``name`` (shape ``shape``); for a fused
    tensor, ``part`` = (start, stop) along the Paddle-layout output axis and ``full`` = the fused
    tensor's Paddle-layout shape."""

    name: str
    shape: tuple[int, ...]
    part: tuple[int, int] | None = None
    full: tuple[int, ...] | None = None


def _canonical(name: str) -> str:
    """HF/torch prefix ``model.`` -> contract prefix ``ernie.``."""
    return "ernie." + name[len("model.") :] if name.startswith("model.") else name


def _is_linear_weight(name: str) -> bool:
    return (
        name.endswith(("_proj.weight", ".mlp.gate.weight"))
        or name in ("lm_head.weight",)
        or bool(re.search(r"mtp_linear_proj\.\d+\.weight$", name))
    )


def _qkv_widths(cfg: ErnieConfig) -> list[int]:
    d = cfg.head_dim
    return [cfg.num_attention_heads * d, cfg.num_key_value_heads * d, cfg.num_key_value_heads * d]


def _build_plan(tensors: Mapping, cfg: ErnieConfig, wanted: dict[str, list[int]]):
    """-> (plan {param name: _Source}, unexpected [stored names], errors [str])."""
    plan: dict[str, _Source] = {}
    unexpected: list[str] = []
    errors: list[str] = []

    def add(param, src):
        if param in plan:
            errors.append(f"{param}: stored twice, as {plan[param].name!r} and {src.name!r}")
        else:
            plan[param] = src

    for stored in tensors:
        if _IGNORED.search(stored):
            continue
        name = _canonical(stored)
        shape = _shape_of(tensors, stored)
        m = re.match(r"^(.*\.self_attn)\.qkv_proj\.(weight|bias)$", name)
        if m:
            widths = _qkv_widths(cfg)
            parts = [f"{m.group(1)}.{p}_proj.{m.group(2)}" for p in "qkv"]
        else:
            m = re.match(r"^(.*)\.up_gate_proj\.(weight|bias)$", name)
            if m:
                parts = [f"{m.group(1)}.{p}_proj.{m.group(2)}" for p in ("gate", "up")]
                ref = wanted.get(parts[0])
                widths = [ref[-1], ref[-1]] if ref is not None else None
            else:
                parts = None
        if parts is None:
            add(name, _Source(stored, shape))
            continue
        if widths is None or any(p not in wanted for p in parts):
            unexpected.append(stored)
            continue
        inner = wanted[parts[0]][:-1]  # [H] for a weight, [] for a bias
        full = tuple(inner) + (sum(widths),)
        start = 0
        for p, w in zip(parts, widths):
            add(p, _Source(stored, shape, (start, start + w), full))
            start += w
    return plan, unexpected, errors


def _orient(param: str, src: _Source, expected: tuple[int, ...], torch_layout: bool):
    """-> (transpose: bool, error: str | None) for the stored tensor feeding ``param``."""
    target = src.full if src.full is not None else expected
    stored = src.shape
    if len(target) == 2 and _is_linear_weight(param):
        rev = target[::-1]
        if target[0] == target[1]:
            if stored == target:
                return torch_layout, None
        elif stored == target:
            return False, None
        elif stored == rev:
            return True, None
        what = f"fused {src.name!r} " if src.full is not None else ""
        return False, (
            f"{param}: {what}shape {list(stored)} matches neither the expected Paddle layout "
            f"{list(target)} ([in, out]) nor the torch layout {list(rev)} ([out, in])"
        )
    if param.endswith("e_score_correction_bias") and stored == target[1:] and target[:1] == (1,):
        return False, None  # [E] stored for [1, E]: reshaped
    if stored != target:
        what = f" (fused {src.name!r})" if src.full is not None else ""
        return False, f"{param}{what}: expected shape {list(target)}, checkpoint has {list(stored)}"
    return False, None


def _value(
    tensors: Mapping, src: _Source, transpose: bool, shape: tuple[int, ...] | None = None
) -> np.ndarray:
    a = _as_numpy(tensors[src.name])
    if transpose:
        a = a.T
    if src.part is not None:
        a = a[..., src.part[0] : src.part[1]]
    if shape is not None:
        a = a.reshape(shape)
    return np.ascontiguousarray(a)


def _listing(names, limit=_MAX_LISTED) -> str:
    names = list(names)
    more = f" ... and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def load_weights(
    model_or_mtp,
    tensors: Mapping,
    *,
    strict: bool = True,
    layout: str = "auto",
    progress: bool | None = None,
) -> None:
    """Copy ``tensors`` (``{name: array}``; a :class:`SafetensorsCheckpoint` reads lazily) into an
    :class:`Ernie4_5ForCausalLM` or :class:`Ernie4_5MTP` (see the module docstring for the names,
    layouts and fused tensors accepted).

    Args:
        model_or_mtp: the module; its ``state_dict()`` keys are the contract names.
        tensors: mapping of stored name -> array (numpy, or anything ``np.asarray`` takes).
        strict: unexpected tensors raise (True) or warn (False; a router correction bias the
            config does not expect raises either way).
        layout: ``"auto"`` | ``"paddle"`` | ``"torch"``: how square linear weights are stored.
        progress: tqdm bar (None: only above 256 MiB).

    Raises:
        ValueError naming the tensor: missing, mis-shaped (with expected and stored shapes), stored
        twice, or unexpected (``strict``). Nothing is written when it raises.
    """
    import paddle

    if layout not in ("auto", "paddle", "torch"):
        raise ValueError(f"layout must be 'auto', 'paddle' or 'torch', got {layout!r}")
    # a tensor-parallel model (`fd_mtp.model.parallel`) holds shards: the plan is made on the
    # checkpoint's names and full shapes, each value cut to this rank's shard when assigned
    cfg: ErnieConfig = getattr(model_or_mtp, "full_config", model_or_mtp.config)
    params = model_or_mtp.state_dict()
    tp_sources = getattr(model_or_mtp, "tp_sources", lambda: None)()
    wanted, targets, everything = _wanted(cfg, params, tp_sources)
    torch_layout = layout == "torch" or (
        layout == "auto"
        and any(str(n).startswith("model.") and not _IGNORED.search(str(n)) for n in tensors)
    )
    who = type(model_or_mtp).__name__
    plan, orient, tied_head = _checked_plan(
        who, tensors, cfg, wanted, everything, torch_layout, strict
    )
    _copy_values(paddle, who, tensors, plan, orient, wanted, targets, params, progress)
    if tied_head is not None and tp_sources is None:
        _warn_if_tied_head_differs(paddle, tensors, tied_head, cfg, params, torch_layout)


def _wanted(cfg: ErnieConfig, params, tp_sources):
    """-> (wanted {checkpoint name: shape}, targets {checkpoint name: [(param, cut)]}, everything
    {every name of the model and its MTP block: shape}) for the module's parameters ``params``
    (``tp_sources``: a tensor-parallel shard's {param: (checkpoint name, cut)}, or None)."""
    from .ernie import state_dict_names

    everything = state_dict_names(cfg, mtp=True)
    if tp_sources is None:
        wanted = {k: list(v.shape) for k, v in params.items()}
        targets = {k: [(k, None)] for k in params}
    else:
        wanted, targets = {}, {}
        for local, (name, cut) in tp_sources.items():
            wanted[name] = everything[name]
            targets.setdefault(name, []).append((local, cut))
    everything.update(wanted)
    return wanted, targets, everything


def _checked_plan(who, tensors, cfg, wanted, everything, torch_layout, strict):
    """-> (plan {param: _Source}, orient {param: transpose}, tied lm_head _Source or None).
    Raises ValueError (``who``: the module's class name) for missing, mis-shaped, doubly stored,
    unexpected (``strict``) tensors and router biases the config has no parameter for; warns of
    unexpected tensors otherwise. Nothing is written."""
    plan, unexpected, errors = _build_plan(tensors, cfg, everything)
    tied_head = None
    for name in list(plan):
        if name in wanted:
            continue
        src = plan.pop(name)
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            tied_head = src
        elif name not in everything:
            unexpected.append(src.name)

    missing = [n for n in wanted if n not in plan]
    if missing:
        errors.append(f"missing tensor(s): {_listing(missing)}")
    orient: dict[str, bool] = {}
    for name, src in plan.items():
        t, err = _orient(name, src, tuple(wanted[name]), torch_layout)
        if err:
            errors.append(err)
        orient[name] = t
    if errors:
        raise ValueError(f"{who}: cannot load weights: " + "; ".join(errors))
    _refuse_unexpected(who, unexpected, cfg, strict)
    return plan, orient, tied_head


def _refuse_unexpected(who, unexpected, cfg, strict):
    routing = sorted({n for n in unexpected if n.endswith("e_score_correction_bias")})
    if routing:
        # Never dropped, whatever ``strict``: the bias changes which experts are chosen.
        raise ValueError(
            f"{who}: the checkpoint has router correction bias(es) "
            f"{_listing(routing)} that this config has no parameter for (moe_use_aux_free = "
            f"{str(cfg.moe_use_aux_free).lower()}; a dense layer has none); ignoring them would "
            "change the expert choice (a config that leaves out moe_use_aux_free means true, as "
            "in paddleformers)"
        )
    if unexpected:
        msg = f"{who}: unexpected tensor(s) in the checkpoint: {_listing(sorted(set(unexpected)))}"
        if strict:
            raise ValueError(msg + " (load with strict=False to ignore them)")
        # stacklevel: the caller of load_weights (load_weights -> _checked_plan -> here)
        warnings.warn(msg, UserWarning, stacklevel=4)


def _copy_values(paddle, who, tensors, plan, orient, wanted, targets, params, progress):
    """Assign every planned value (turned, cut out of its fused tensor, cut to this rank's
    shard), with a tqdm bar when ``progress`` (None: above PROGRESS_BYTES)."""
    sources = {s.name for s in plan.values()}
    if progress is None:
        progress = sum(_nbytes_of(tensors, s) for s in sources) > PROGRESS_BYTES
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(plan), desc=f"loading {who}", unit="tensor")
    cache: dict[tuple[str, bool], np.ndarray] = {}  # a fused tensor is read once for its parts
    try:
        for name, src in plan.items():
            key = (src.name, orient[name])
            if src.part is not None:
                if key not in cache:
                    cache.clear()
                    cache[key] = _value(tensors, _Source(src.name, src.shape), orient[name])
                full = cache[key]
                value = np.ascontiguousarray(full[..., src.part[0] : src.part[1]])
            else:
                value = _value(tensors, src, orient[name], tuple(wanted[name]))
            for local, cut in targets[name]:
                _assign(paddle, params[local], value if cut is None else cut(np.asarray(value)))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()


def _warn_if_tied_head_differs(paddle, tensors, tied_head, cfg, params, torch_layout):
    t, err = _orient("lm_head.weight", tied_head, (cfg.hidden_size, cfg.vocab_size), torch_layout)
    emb = params.get("ernie.embed_tokens.weight")
    if err is None and emb is not None:
        head = paddle.to_tensor(np.asarray(_value(tensors, tied_head, t), dtype=np.float32))
        head = head.astype(emb.dtype).astype("float32").numpy()
        if not np.array_equal(head, emb.astype("float32").numpy().T):
            warnings.warn(
                "lm_head.weight is in the checkpoint but tie_word_embeddings is true: it is "
                "ignored, and it differs from the transposed embedding",
                UserWarning,
                stacklevel=3,  # the caller of load_weights
            )


def _assign(paddle, param, value: np.ndarray) -> None:
    dt = str(param.dtype).replace("paddle.", "")
    if dt == "float32":
        param.set_value(np.asarray(value, dtype=np.float32))
    else:
        src = value if value.dtype != np.float64 else value.astype(np.float32)
        param.set_value(paddle.to_tensor(src).astype(param.dtype))
