"""Reading and writing EAGLE / EAGLE-3 head directories (`fd_mtp.model.eagle`'s layout).

``load_eagle_head`` reads either layout of the linear weights: Paddle's ``[in, out]`` (what
``save_eagle_head`` writes by default) or torch's ``[out, in]`` (vLLM's and SpecForge's heads):
``layout="auto"`` tells them apart by the input projection, whose two dimensions always differ
(EAGLE-1 ``fc.weight`` ``[2H, H]``, EAGLE-3 ``eh_proj.weight`` ``[2H, H]``), and then every
other tensor must have that layout's shape (a head mixing the two is refused by tensor name).
In the torch layout every 2-D tensor but ``embed_tokens.weight`` is transposed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import paddle

from .eagle import CONFIG_FILE, EagleHead, EagleHeadConfig, eagle_tensor_shapes

__all__ = ["LAYOUTS", "load_eagle_head", "save_eagle_head"]

LAYOUTS = ("auto", "paddle", "torch")


def _param_targets(head: EagleHead) -> dict:
    """checkpoint name -> the head's parameter."""
    out = {}
    for name, p in head.named_parameters():
        if name == "lm_head_weight":
            name = "lm_head.weight"
        out[name] = p
    return out


def _transposed(name: str, shape) -> bool:
    """Whether ``name`` is stored ``[out, in]`` in the torch layout (every matrix but the
    embedding)."""
    return len(shape) == 2 and name != "embed_tokens.weight"


def _detect_layout(d: Path, cfg: EagleHeadConfig, tensors) -> str:
    """ "paddle" or "torch" by the input projection's shape; ValueError when it is neither."""
    name = "fc.weight" if cfg.method == "eagle" else "eh_proj.weight"
    want = [2 * cfg.hidden_size, cfg.hidden_size]
    if name not in tensors:
        raise ValueError(f"EAGLE head {d}: missing tensors [{name!r}]")
    got = list(tensors.shape(name))
    if got == want:
        return "paddle"
    if got == want[::-1]:
        return "torch"
    raise ValueError(
        f"EAGLE head {d}: tensor {name} has shape {got}, expected {want} (Paddle layout) or "
        f"{want[::-1]} (torch layout)"
    )


def load_eagle_head(path, main, method: str | None = None, layout: str = "auto") -> EagleHead:
    """The `EagleHead` in checkpoint directory ``path`` for target ``main`` (an
    ``Ernie4_5ForCausalLM``); ``method`` ("eagle" / "eagle3", the SpeculativeConfig's) must match
    the head's ``model_type``; ``layout``: "auto" (see the module docstring), "paddle" or
    "torch". EAGLE-3: the target is set to keep the head's aux hidden states
    (``main.capture_aux_hidden_states``).

    Raises:
        FileNotFoundError: no directory, config.json or safetensors file.
        ValueError: naming the field or tensor that does not fit the target (hidden size, vocab,
            layer list, d2t map, a missing / unexpected / mis-shaped tensor), or ``layout``.
    """
    from .safetensors_io import SafetensorsCheckpoint

    if layout not in LAYOUTS:
        raise ValueError(f"load_eagle_head: layout must be one of {LAYOUTS}, got {layout!r}")
    d = Path(path)
    if not d.is_dir():
        raise FileNotFoundError(f"EAGLE head directory not found: {d}")
    if not (d / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"{d}: no {CONFIG_FILE}")
    cfg = EagleHeadConfig.from_file(d / CONFIG_FILE, main.full_config, method)
    with SafetensorsCheckpoint.from_dir(d) as tensors:
        names = set(tensors)
        if layout == "auto":
            layout = _detect_layout(d, cfg, tensors)
        head = EagleHead(
            cfg,
            main,
            own_embedding="embed_tokens.weight" in names,
            own_lm_head="lm_head.weight" in names,
            fc_bias="fc.bias" in names,
        )
        expected = eagle_tensor_shapes(
            cfg, own_embedding=head.own_embedding, own_lm_head=head.own_lm_head
        )
        if "fc.bias" in names:
            expected["fc.bias"] = [cfg.hidden_size]
        if cfg.method == "eagle3" and "t2d" in names:
            expected["t2d"] = [cfg.vocab_size]
        missing = sorted(set(expected) - names)
        if missing:
            raise ValueError(f"EAGLE head {d}: missing tensors {missing}")
        unexpected = sorted(names - set(expected))
        if unexpected:
            raise ValueError(f"EAGLE head {d}: unexpected tensors {unexpected}")
        torch = layout == "torch"
        for name, shape in expected.items():
            want = shape[::-1] if torch and _transposed(name, shape) else shape
            got = list(tensors.shape(name))
            if got != want:
                raise ValueError(
                    f"EAGLE head {d}: tensor {name} has shape {got}, expected {want} "
                    f"({layout} layout: linear weights {'[out, in]' if torch else '[in, out]'})"
                )
        for name, p in _param_targets(head).items():
            value = np.asarray(tensors[name], dtype=np.float32)
            if torch and _transposed(name, value.shape):
                value = np.ascontiguousarray(value.T)
            p.set_value(paddle.to_tensor(value).astype(p.dtype))
        if cfg.method == "eagle3":
            head.set_d2t(tensors["d2t"])
            if "t2d" in names:
                t2d = np.asarray(tensors["t2d"]).astype(bool)
                want = np.zeros(cfg.vocab_size, bool)
                want[head.draft_to_target.numpy()] = True
                if not np.array_equal(t2d, want):
                    raise ValueError(
                        f"EAGLE head {d}: t2d does not mark exactly the target ids of d2t"
                    )
    if cfg.method == "eagle3":
        main.capture_aux_hidden_states(cfg.aux_layer_ids)
    head.eval()
    return head


def save_eagle_head(head: EagleHead, path, layout: str = "paddle") -> Path:
    """Write ``head`` to checkpoint directory ``path`` (created; older safetensors files there
    are removed) as `load_eagle_head` reads it: config.json and model.safetensors (float32;
    ``layout`` "paddle" ``[in, out]`` or "torch" ``[out, in]`` linear weights; a shared
    embedding / lm_head is not written; EAGLE-3: ``d2t`` from `EagleHead.set_d2t`, which must
    have been called). Returns the directory."""
    from .safetensors_io import save_safetensors

    if layout not in ("paddle", "torch"):
        raise ValueError(f"save_eagle_head: layout must be 'paddle' or 'torch', got {layout!r}")
    tensors = {}
    for name, p in _param_targets(head).items():
        value = p.astype("float32").numpy()
        if layout == "torch" and _transposed(name, value.shape):
            value = np.ascontiguousarray(value.T)
        tensors[name] = value
    if head.method == "eagle3":
        if head.draft_to_target is None:
            raise ValueError("save_eagle_head: the EAGLE-3 head has no d2t map (call set_d2t)")
        targets = head.draft_to_target.numpy().astype(np.int64)
        tensors["d2t"] = targets - np.arange(targets.size, dtype=np.int64)
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("model*.safetensors*"):
        stale.unlink()
    d = head.head_config.to_dict()
    (out / CONFIG_FILE).write_text(json.dumps(d, indent=2, sort_keys=True) + "\n")
    save_safetensors(tensors, out)
    return out
