"""Loading (and writing) ERNIE-4.5 checkpoint directories: ``config.json`` + safetensors.

A checkpoint directory holds ``config.json`` (:class:`fd_mtp.model.ErnieConfig` fields) and either
``model.safetensors`` or shards ``model-0000x-of-0000y.safetensors`` listed by
``model.safetensors.index.json`` (its ``weight_map``). :func:`load_checkpoint` builds
:class:`~fd_mtp.model.ernie.Ernie4_5ForCausalLM` and, when ``num_nextn_predict_layers >= 1`` and the
checkpoint has MTP weights, :class:`~fd_mtp.model.ernie.Ernie4_5MTP`; :func:`load_weights` copies a
``{name: array}`` mapping into either module. Nothing is downloaded, ever: paths are local.

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

import json
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .config import ErnieConfig

__all__ = [
    "CONFIG_FILE",
    "SAFETENSORS_FILE",
    "SAFETENSORS_INDEX_FILE",
    "SafetensorsCheckpoint",
    "load_checkpoint",
    "load_weights",
    "load_tokenizer",
    "save_checkpoint",
    "save_safetensors",
    "checkpoint_files",
    "to_torch_layout",
]

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX_FILE = "model.safetensors.index.json"
PROGRESS_BYTES = 256 << 20  # progress bar above this checkpoint size (progress=None)
_MAX_LISTED = 12

_SHARD_RE = re.compile(r"^model-(\d{5})-of-(\d{5})\.safetensors$")
_IGNORED = re.compile(r"(^|\.)rotary_emb\.inv_freq$")
_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}


# --------------------------------------------------------------------------- reading safetensors
def checkpoint_files(path) -> list[Path]:
    """The safetensors files of checkpoint directory ``path`` (one file, or the shards named by
    ``model.safetensors.index.json``, or a lone ``model-*-of-*.safetensors`` set)."""
    d = Path(path)
    if not d.is_dir():
        raise FileNotFoundError(f"checkpoint directory not found: {d}")
    index = d / SAFETENSORS_INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(
                f"{index}: not a safetensors index (needs a 'weight_map' dict): {e}"
            ) from None
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError(f"{index}: 'weight_map' must be a non-empty dict")
        files = [d / f for f in sorted(set(weight_map.values()))]
        for f in files:
            if not f.is_file():
                raise FileNotFoundError(f"{index} names shard {f.name}, which is missing")
        return files
    single = d / SAFETENSORS_FILE
    if single.is_file():
        return [single]
    shards = sorted(p for p in d.iterdir() if _SHARD_RE.match(p.name))
    if shards:
        total = {int(_SHARD_RE.match(p.name).group(2)) for p in shards}
        if len(total) != 1 or len(shards) != total.pop():
            raise ValueError(
                f"{d}: incomplete shard set {[p.name for p in shards]} and no {SAFETENSORS_INDEX_FILE}"
            )
        return shards
    raise FileNotFoundError(
        f"{d}: no {SAFETENSORS_FILE}, {SAFETENSORS_INDEX_FILE} or model-*-of-*.safetensors"
    )


class SafetensorsCheckpoint(Mapping):
    """Read-only ``{name: np.ndarray}`` view of one or more safetensors files. Shapes and dtypes come
    from the headers (:meth:`shape`, :meth:`dtype`, :meth:`nbytes`) without reading data; a tensor is
    read when indexed. BF16 tensors come back as (exactly upcast) float32 arrays. Use as a context
    manager or call :meth:`close`."""

    def __init__(self, files):
        from safetensors import safe_open

        self._files = [Path(f) for f in files]
        self._handles = []
        self._where: dict[str, int] = {}
        self._info: dict[str, tuple[tuple[int, ...], str]] = {}
        for i, f in enumerate(self._files):
            h = safe_open(str(f), framework="np")
            self._handles.append(h)
            for name in h.keys():
                if name in self._where:
                    raise ValueError(
                        f"tensor {name!r} is stored twice: in {self._files[self._where[name]].name} "
                        f"and {f.name}"
                    )
                s = h.get_slice(name)
                self._where[name] = i
                self._info[name] = (tuple(int(x) for x in s.get_shape()), s.get_dtype())

    @classmethod
    def from_dir(cls, path) -> SafetensorsCheckpoint:
        return cls(checkpoint_files(path))

    def __getitem__(self, name: str) -> np.ndarray:
        i = self._where[name]
        if self._info[name][1] == "BF16":
            from safetensors import safe_open

            with safe_open(str(self._files[i]), framework="paddle") as f:
                return f.get_tensor(name).astype("float32").numpy()
        return self._handles[i].get_tensor(name)

    def __iter__(self):
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._info[name][0]

    def dtype(self, name: str) -> str:
        """safetensors dtype string (``F32``, ``BF16``, ...)."""
        return self._info[name][1]

    def nbytes(self, name: str | None = None) -> int:
        if name is None:
            return sum(self.nbytes(n) for n in self._where)
        shape, dt = self._info[name]
        return int(np.prod(shape, dtype=np.int64)) * _BYTES.get(dt, 4)

    def close(self) -> None:
        self._handles = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _shape_of(tensors: Mapping, name: str) -> tuple[int, ...]:
    if isinstance(tensors, SafetensorsCheckpoint):
        return tensors.shape(name)
    v = tensors[name]
    shape = v.shape if hasattr(v, "shape") else np.shape(v)
    return tuple(int(x) for x in shape)


def _as_numpy(v) -> np.ndarray:
    """numpy array of ``v`` (a numpy array, a Paddle tensor (bfloat16 upcast exactly to float32), or
    anything ``np.asarray`` takes)."""
    if isinstance(v, np.ndarray):
        return v
    if hasattr(v, "numpy") and hasattr(v, "astype"):
        if "bfloat16" in str(getattr(v, "dtype", "")):
            v = v.astype("float32")
        return v.numpy()
    return np.asarray(v)


def _nbytes_of(tensors: Mapping, name: str) -> int:
    if isinstance(tensors, SafetensorsCheckpoint):
        return tensors.nbytes(name)
    return int(getattr(tensors[name], "nbytes", 0))


# --------------------------------------------------------------------------- name / layout plan
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
    from .ernie import state_dict_names

    # a tensor-parallel model (`fd_mtp.model.parallel`) holds shards: the plan is made on the
    # checkpoint's names and full shapes, each value cut to this rank's shard when assigned
    cfg: ErnieConfig = getattr(model_or_mtp, "full_config", model_or_mtp.config)
    params = model_or_mtp.state_dict()
    tp_sources = getattr(model_or_mtp, "tp_sources", lambda: None)()
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
    torch_layout = layout == "torch" or (
        layout == "auto"
        and any(str(n).startswith("model.") and not _IGNORED.search(str(n)) for n in tensors)
    )

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
        raise ValueError(
            f"{type(model_or_mtp).__name__}: cannot load weights: " + "; ".join(errors)
        )
    routing = sorted({n for n in unexpected if n.endswith("e_score_correction_bias")})
    if routing:
        # Never dropped, whatever ``strict``: the bias changes which experts are chosen.
        raise ValueError(
            f"{type(model_or_mtp).__name__}: the checkpoint has router correction bias(es) "
            f"{_listing(routing)} that this config has no parameter for (moe_use_aux_free = "
            f"{str(cfg.moe_use_aux_free).lower()}; a dense layer has none); ignoring them would "
            "change the expert choice (a config that leaves out moe_use_aux_free means true, as "
            "in paddleformers)"
        )
    if unexpected:
        msg = (
            f"{type(model_or_mtp).__name__}: unexpected tensor(s) in the checkpoint: "
            f"{_listing(sorted(set(unexpected)))}"
        )
        if strict:
            raise ValueError(msg + " (load with strict=False to ignore them)")
        warnings.warn(msg, UserWarning, stacklevel=2)

    sources = {s.name for s in plan.values()}
    if progress is None:
        progress = sum(_nbytes_of(tensors, s) for s in sources) > PROGRESS_BYTES
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(plan), desc=f"loading {type(model_or_mtp).__name__}", unit="tensor")
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

    if tied_head is not None and tp_sources is None:
        t, err = _orient(
            "lm_head.weight", tied_head, (cfg.hidden_size, cfg.vocab_size), torch_layout
        )
        emb = params.get("ernie.embed_tokens.weight")
        if err is None and emb is not None:
            head = paddle.to_tensor(np.asarray(_value(tensors, tied_head, t), dtype=np.float32))
            head = head.astype(emb.dtype).astype("float32").numpy()
            if not np.array_equal(head, emb.astype("float32").numpy().T):
                warnings.warn(
                    "lm_head.weight is in the checkpoint but tie_word_embeddings is true: it is "
                    "ignored, and it differs from the transposed embedding",
                    UserWarning,
                    stacklevel=2,
                )


def _assign(paddle, param, value: np.ndarray) -> None:
    dt = str(param.dtype).replace("paddle.", "")
    if dt == "float32":
        param.set_value(np.asarray(value, dtype=np.float32))
    else:
        src = value if value.dtype != np.float64 else value.astype(np.float32)
        param.set_value(paddle.to_tensor(src).astype(param.dtype))


# --------------------------------------------------------------------------- load_checkpoint
def load_checkpoint(
    path,
    *,
    dtype: str | None = None,
    attn_backend=None,
    strict: bool = True,
    layout: str = "auto",
    progress: bool | None = None,
    tp=None,
):
    """Build the models of checkpoint directory ``path``.

    Args:
        path: directory with ``config.json`` and ``model.safetensors`` (or shards + index).
        dtype: ``"float32"`` / ``"float16"`` / ``"bfloat16"`` parameters; None: the config's
            ``dtype`` (``torch_dtype``), except float32 when Paddle runs on the CPU (its CPU build
            has no half-precision matmul; the model refuses half dtypes there). The returned
            config carries the dtype used.
        attn_backend: passed to :class:`Ernie4_5ForCausalLM` (None: ``PagedAttentionCPU``).
        strict, layout, progress: see :func:`load_weights`.
        tp: a `fd_mtp.model.parallel.TensorParallel`: build this rank's shard of the models and
            load only its part of every tensor (ValueError when the group size does not divide
            the heads, kv heads, MLP widths or experts). None: the whole model.

    Returns:
        ``(model, mtp, config)``: ``mtp`` is an :class:`Ernie4_5MTP` sharing ``model``'s embedding,
        final norm and lm_head when ``config.num_nextn_predict_layers >= 1`` and the checkpoint has
        MTP weights (``ernie.mtp_*`` / ``model.mtp_*``), else None. Both in eval mode.

    Raises:
        FileNotFoundError (no directory / config / weights), ValueError naming the bad config field or
        the missing / mis-shaped / unexpected tensor.
    """
    from .ernie import Ernie4_5ForCausalLM, Ernie4_5MTP

    d = Path(path)
    if not d.is_dir():
        raise FileNotFoundError(f"checkpoint directory not found: {d}")
    if not (d / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"{d}: no {CONFIG_FILE}")
    config = ErnieConfig.from_file(d / CONFIG_FILE)
    if dtype is None and config.dtype != "float32":
        import paddle

        if paddle.device.get_device() == "cpu":
            dtype = "float32"  # Paddle's CPU build has no half-precision matmul
    if dtype is not None:
        config = replace(config, dtype=str(dtype).replace("paddle.", ""))
    with SafetensorsCheckpoint.from_dir(d) as tensors:
        if progress is None:
            progress = tensors.nbytes() > PROGRESS_BYTES
        model = Ernie4_5ForCausalLM(config, attn_backend, tp=tp)
        load_weights(model, tensors, strict=strict, layout=layout, progress=progress)
        mtp = None
        has_mtp = any(_canonical(n).startswith("ernie.mtp_") for n in tensors)
        if config.num_nextn_predict_layers >= 1 and has_mtp:
            mtp = Ernie4_5MTP(config, model)
            load_weights(mtp, tensors, strict=strict, layout=layout, progress=progress)
            mtp.eval()
    model.eval()
    return model, mtp, config


# --------------------------------------------------------------------------- writing
def _to_storable(value, dtype: str | None):
    """numpy array (or paddle tensor) -> something safetensors can write, in ``dtype``."""
    if dtype in ("bfloat16",):
        import paddle

        t = (
            value
            if isinstance(value, paddle.Tensor)
            else paddle.to_tensor(np.asarray(value, dtype=np.float32))
        )
        return t.astype("bfloat16")
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    arr = np.ascontiguousarray(value)
    return arr.astype(dtype) if dtype is not None else arr


def save_safetensors(
    tensors: Mapping,
    directory,
    *,
    shard_size: int | None = None,
    dtype: str | None = None,
    keep_float32: tuple[str, ...] = (),
) -> list[Path]:
    """Write ``tensors`` into ``directory`` as ``model.safetensors``, or, when ``shard_size`` (bytes)
    is given and exceeded, as ``model-0000x-of-0000y.safetensors`` + ``model.safetensors.index.json``.
    ``dtype`` converts floating tensors (``"float16"``, ``"bfloat16"``, ``"float32"``) except those
    whose name contains one of ``keep_float32``. Returns the files written."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    items = []
    for name in tensors:
        v = tensors[name]
        dt = dtype
        if dt is not None and (
            any(k in name for k in keep_float32)
            or not np.issubdtype(np.asarray(v).dtype, np.floating)
        ):
            dt = None
        items.append((name, _to_storable(v, dt)))

    def nbytes(v):
        return int(np.prod(v.shape, dtype=np.int64)) * (
            2 if str(getattr(v, "dtype", "")).endswith("bfloat16") else np.dtype(v.dtype).itemsize
        )

    groups: list[list] = [[]]
    size = 0
    for name, v in items:
        if shard_size is not None and groups[-1] and size + nbytes(v) > shard_size:
            groups.append([])
            size = 0
        groups[-1].append((name, v))
        size += nbytes(v)

    def write(group, path):
        if any(not isinstance(v, np.ndarray) for _, v in group):
            import paddle
            from safetensors.paddle import save_file

            save_file(
                {
                    n: (v if not isinstance(v, np.ndarray) else paddle.to_tensor(v))
                    for n, v in group
                },
                str(path),
                metadata={"format": "pd"},
            )
        else:
            from safetensors.numpy import save_file

            save_file(dict(group), str(path), metadata={"format": "np"})

    if len(groups) == 1:
        path = d / SAFETENSORS_FILE
        write(groups[0], path)
        return [path]
    files, weight_map = [], {}
    for i, group in enumerate(groups):
        path = d / f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        write(group, path)
        files.append(path)
        for name, _ in group:
            weight_map[name] = path.name
    total = sum(nbytes(v) for _, v in items)
    (d / SAFETENSORS_INDEX_FILE).write_text(
        json.dumps(
            {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2, sort_keys=True
        )
        + "\n"
    )
    return files


def to_torch_layout(tensors: Mapping) -> dict:
    """``{name: value}`` of the Paddle layout (``ernie.*`` names, linear weights ``[in, out]``) in
    the layout paddleformers >= 1.0 and Hugging Face save and load: prefix ``model.`` instead of
    ``ernie.`` and linear weights ``[out, in]`` (q/k/v/o, gate/up/down, experts, shared experts,
    the router ``mlp.gate.weight``, ``mtp_linear_proj``, ``lm_head``). Embeddings, norms, biases
    and ``e_score_correction_bias`` are unchanged. Values may be numpy arrays or Paddle tensors."""
    out = {}
    for name in tensors:
        v = tensors[name]
        if _is_linear_weight(name) and len(v.shape) == 2:
            v = np.ascontiguousarray(v.T) if isinstance(v, np.ndarray) else v.T
        out["model." + name[len("ernie.") :] if name.startswith("ernie.") else name] = v
    return out


def save_checkpoint(
    directory,
    config: ErnieConfig,
    tensors: Mapping,
    *,
    shard_size: int | None = None,
    dtype: str | None = None,
    layout: str = "paddle",
) -> Path:
    """Write ``config.json`` and the safetensors file(s) of ``tensors`` (Paddle-layout names, as
    :func:`fd_mtp.model.ernie.state_dict_names`) into ``directory``. The MoE router
    (``mlp.gate.weight``) and ``e_score_correction_bias`` stay float32 whatever ``dtype``; the
    config's ``dtype`` is written as ``dtype`` when one is given (so it says what the tensors are).

    ``layout``: ``"paddle"`` writes the names and ``[in, out]`` weights as given; ``"torch"``
    writes :func:`to_torch_layout` (``model.*``, ``[out, in]``), the layout paddleformers'
    ``from_pretrained`` loads (it loads none of a ``"paddle"`` one). fd_mtp loads both."""
    if layout not in ("paddle", "torch"):
        raise ValueError(f"layout must be 'paddle' or 'torch', got {layout!r}")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    if dtype is not None:
        config = replace(config, dtype=str(dtype).replace("paddle.", ""))
    if layout == "torch":
        tensors = to_torch_layout(tensors)
    (d / CONFIG_FILE).write_text(json.dumps(config.to_dict(), indent=2, sort_keys=True) + "\n")
    save_safetensors(
        tensors,
        d,
        shard_size=shard_size,
        dtype=dtype,
        keep_float32=(".mlp.gate.weight", "e_score_correction_bias"),
    )
    return d


# --------------------------------------------------------------------------- tokenizer
_TOKENIZER_FILES = (
    "tokenizer_config.json",
    "tokenizer.json",
    "tokenizer.model",
    "vocab.json",
    "spm.model",
)


def load_tokenizer(path):
    """The checkpoint's tokenizer (local files only; never downloads): paddleformers'
    ``AutoTokenizer`` when paddleformers is installed, else, for a SentencePiece ``tokenizer.model``
    (what ERNIE-4.5 checkpoints ship), `fd_mtp.model.tokenizer.SentencePieceTokenizer`, which needs
    only the ``sentencepiece`` package.

    Raises:
        FileNotFoundError: ``path`` is not a directory or has no tokenizer file
            (tokenizer_config.json, tokenizer.json, tokenizer.model, ...).
        ImportError: neither paddleformers nor (for tokenizer.model) sentencepiece is installed
            (prompts can still be token ids).
    """
    d = Path(path)
    if not d.is_dir():
        raise FileNotFoundError(f"tokenizer directory not found: {d}")
    if not any((d / f).is_file() for f in _TOKENIZER_FILES):
        raise FileNotFoundError(
            f"{d}: no tokenizer files (looked for {', '.join(_TOKENIZER_FILES)})"
        )
    try:
        from paddleformers.transformers import AutoTokenizer
    except ImportError as e:
        if (d / "tokenizer.model").is_file():
            from .tokenizer import SentencePieceTokenizer

            return SentencePieceTokenizer(d)
        raise ImportError(
            f"{d} has no tokenizer.model, and its tokenizer files need paddleformers, which is not "
            "installed (`pip install paddleformers`); without it, pass prompts as token-id lists"
        ) from e
    return AutoTokenizer.from_pretrained(str(d), local_files_only=True)
