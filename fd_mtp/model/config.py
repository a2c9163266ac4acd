"""``ErnieConfig``: the ERNIE-4.5 / ERNIE-4.5-MoE architecture read from a ``config.json``.

Field names are those of the ERNIE-4.5 checkpoints' ``config.json`` (paddleformers' and Hugging
Face's ``Ernie4_5Config`` / ``Ernie4_5_MoeConfig``): ``moe_num_experts``, ``moe_k``,
``moe_intermediate_size``, ``moe_num_shared_experts``, ``moe_layer_start_index``,
``moe_layer_end_index``, ``moe_layer_interval``, ``moe_norm_min``, ``num_nextn_predict_layers``,
``head_dim``, ``rope_theta``, ``tie_word_embeddings``, ``use_bias``, ... Standard library only (no
paddle import), so ``import fd_mtp.model`` stays cheap.

Three fields beyond the issue-5 interface contract, because real ERNIE-4.5-MoE configs carry them:
``moe_layer_end_index`` (-1 = no end), ``moe_norm_min`` (1e-12, the floor of the top-k weight
renormalisation) and ``moe_use_aux_free`` (True = MoE layers carry
``moe_statics.e_score_correction_bias``, added to the router probabilities for the expert choice
only, as FastDeploy's ``gate_correction_bias``).

Defaults for fields a ``config.json`` leaves out (issue 17)
------------------------------------------------------------
The released ERNIE-4.5 configs (ERNIE-4.5-0.3B, -21B-A3B, -300B-A47B) all spell out ``head_dim``
(128), ``rope_theta`` (500000) and ``rms_norm_eps`` (1e-5), so a default only matters for configs
written by other tools. The default is what those released models use, which is also Hugging
Face's ``Ernie4_5Config`` default:

* ``head_dim``: **128** when the key is absent (paddleformers' dense config: 128; HF: 128; every
  released config: 128, including 0.3B where ``hidden_size / num_attention_heads`` is 64, so the
  old ``hidden / heads`` default was wrong for it). An explicit ``"head_dim": null`` means
  ``hidden_size // num_attention_heads`` (as paddleformers and HF treat None); so does
  ``ErnieConfig(...)`` built in Python without ``head_dim`` (a synthetic config; :meth:`to_dict`
  always writes the value, so a saved config is never ambiguous).
* ``rope_theta``: **500000** (released configs and HF; paddleformers' class default is 10000, but
  paddleformers writes ``rope_theta`` into every config it saves).
* ``rms_norm_eps``: **1e-5** (released configs and HF; paddleformers' class default is 1e-6, and it
  too is always written by paddleformers).
* ``moe_use_aux_free``: **True** (paddleformers' default, and it never writes the key: a
  paddleformers-saved MoE checkpoint has ``e_score_correction_bias`` and no flag; HF's MoE always
  has the bias). fd_mtp's :meth:`to_dict` writes the flag explicitly.

Which layers are MoE (:meth:`ErnieConfig.is_moe_layer`): paddleformers' / Hugging Face's rule
``moe_layer_start_index <= i <= end and (i + 1) % moe_layer_interval == 0``. The MTP block is built
as layer index **0** for that rule (:attr:`ErnieConfig.mtp_block_is_moe`), as paddleformers
(``Ernie4_5_MoeDecoderLayer(config, layer_idx)`` for ``layer_idx in range(num_nextn_predict_layers)``)
and FastDeploy (layer id parsed from ``mtp_block.0``) build it: dense whenever
``moe_layer_start_index >= 1``, as in the released MoE models. (Its attention still uses KV-cache
slot ``num_hidden_layers``.)
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

_DTYPES = ("float32", "float16", "bfloat16")
# ``model_type`` of the ERNIE-4.5 text configs (paddleformers' and Hugging Face's ``Ernie4_5Config`` /
# ``Ernie4_5_MoeConfig``); a config without ``model_type`` is accepted as ERNIE-4.5.
MODEL_TYPES = ("ernie4_5", "ernie4_5_moe")
#: ``head_dim`` of a ``config.json`` without the key (the released ERNIE-4.5 models' value).
DEFAULT_HEAD_DIM = 128


@dataclass
class ErnieConfig:
    """ERNIE-4.5 architecture. ``moe_num_experts == 0`` means a dense model.

    >>> c = ErnieConfig(vocab_size=300, hidden_size=64, intermediate_size=128,
    ...                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    >>> c.head_dim, c.is_moe_layer(0)
    (16, False)
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int | None = None  # None -> hidden_size // num_attention_heads
    rms_norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    max_position_embeddings: int = 131072
    tie_word_embeddings: bool = True
    use_bias: bool = False
    # MoE (ERNIE-4.5-MoE): 0 experts = dense
    moe_num_experts: int = 0
    moe_k: int = 2
    moe_intermediate_size: int = 0
    moe_layer_start_index: int = 0
    moe_layer_interval: int = 1
    moe_num_shared_experts: int = 0
    num_nextn_predict_layers: int = 0  # 1 = the checkpoint has an MTP block
    bos_token_id: int = 1
    eos_token_id: int | list[int] = 2
    pad_token_id: int = 0
    dtype: str = "float32"
    # beyond the contract (upstream defaults)
    moe_layer_end_index: int = -1
    moe_norm_min: float = 1e-12
    moe_use_aux_free: bool = True
    extra: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        if (
            self.head_dim is None
            and isinstance(self.hidden_size, int)
            and isinstance(self.num_attention_heads, int)
            and self.num_attention_heads > 0
        ):
            self.head_dim = self.hidden_size // self.num_attention_heads
        self.validate()

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        _check_field_types(self)
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"ErnieConfig.num_key_value_heads ({self.num_key_value_heads}) must divide "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(f"ErnieConfig.head_dim must be even for RoPE, got {self.head_dim}")
        if self.moe_num_experts > 0:
            if not 1 <= self.moe_k <= self.moe_num_experts:
                raise ValueError(
                    f"ErnieConfig.moe_k must be in [1, moe_num_experts={self.moe_num_experts}], "
                    f"got {self.moe_k}"
                )
            if self.moe_intermediate_size <= 0:
                raise ValueError(
                    "ErnieConfig.moe_intermediate_size must be positive when moe_num_experts > 0, "
                    f"got {self.moe_intermediate_size}"
                )
        e = self.moe_layer_end_index
        if isinstance(e, bool) or not isinstance(e, int) or e < -1:
            raise ValueError(f"ErnieConfig.moe_layer_end_index must be an int >= -1, got {e!r}")
        if self.num_nextn_predict_layers > 1:
            raise ValueError(
                "ErnieConfig.num_nextn_predict_layers: only 0 or 1 MTP block is supported, "
                f"got {self.num_nextn_predict_layers}"
            )
        eos = self.eos_token_id
        eos_list = eos if isinstance(eos, list) else [eos]
        if not eos_list or any(
            isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in eos_list
        ):
            raise ValueError(
                f"ErnieConfig.eos_token_id must be a non-negative int or a non-empty list of them, "
                f"got {eos!r}"
            )
        if self.dtype not in _DTYPES:
            raise ValueError(f"ErnieConfig.dtype must be one of {_DTYPES}, got {self.dtype!r}")

    # ------------------------------------------------------------------ derived
    @property
    def is_moe(self) -> bool:
        return self.moe_num_experts > 0

    @property
    def eos_token_ids(self) -> list[int]:
        return (
            list(self.eos_token_id) if isinstance(self.eos_token_id, list) else [self.eos_token_id]
        )

    def is_moe_layer(self, i: int) -> bool:
        """Whether decoder layer index ``i`` has routed experts (the MTP block is index 0 for this
        rule: :attr:`mtp_block_is_moe`)."""
        if self.moe_num_experts <= 0 or i < self.moe_layer_start_index:
            return False
        if (i + 1) % self.moe_layer_interval:
            return False
        end = self.moe_layer_end_index
        if end >= 0 and i > end:
            return False
        return True

    @property
    def mtp_block_is_moe(self) -> bool:
        """Whether the MTP block has routed experts: the rule of :meth:`is_moe_layer` at layer index
        0, as paddleformers and FastDeploy build it (dense when ``moe_layer_start_index >= 1``)."""
        return self.is_moe_layer(0)

    # ------------------------------------------------------------------ (de)serialisation
    @classmethod
    def from_dict(cls, d: dict) -> ErnieConfig:
        """Build from an ERNIE-4.5 ``config.json`` dict. Unknown keys are ignored (kept in ``extra``);
        a missing required key or a bad value raises ValueError naming the field. A ``model_type``
        other than ERNIE-4.5's (:data:`MODEL_TYPES`; absent is accepted) is refused: another
        architecture's config would otherwise load and run as if it were ERNIE-4.5."""
        if not isinstance(d, dict):
            raise ValueError(f"ErnieConfig.from_dict expects a dict, got {type(d).__name__}")
        model_type = d.get("model_type")
        if model_type is not None and model_type not in MODEL_TYPES:
            raise ValueError(
                f"ErnieConfig.model_type {model_type!r} is not supported: fd_mtp runs ERNIE-4.5 "
                f"checkpoints only (model_type one of {list(MODEL_TYPES)})"
            )
        names = {f.name for f in dataclasses.fields(cls) if f.name != "extra"}
        kw = {k: v for k, v in d.items() if k in names}
        # aliases seen in ERNIE / Hugging Face configs
        if "dtype" not in d and "torch_dtype" in d:
            kw["dtype"] = d["torch_dtype"]
        if kw.get("dtype") is None:
            kw.pop("dtype", None)
        if (
            "rope_theta" not in d
            and isinstance(d.get("rope_parameters"), dict)
            and "rope_theta" in d["rope_parameters"]
        ):
            kw["rope_theta"] = d["rope_parameters"]["rope_theta"]
        if "head_dim" not in d:
            kw["head_dim"] = DEFAULT_HEAD_DIM  # released ERNIE-4.5 configs / HF (module docstring)
        if kw.get("num_key_value_heads") is None and "num_attention_heads" in d:
            kw["num_key_value_heads"] = d["num_attention_heads"]
        if kw.get("moe_num_experts") is None:
            kw.pop("moe_num_experts", None)
        if "num_experts" in d and "moe_num_experts" not in d:
            kw["moe_num_experts"] = d["num_experts"]
        for key in ("rope_scaling",):
            rs = d.get(key)
            if rs is not None and not (
                isinstance(rs, dict) and rs.get("rope_type", rs.get("type")) in (None, "default")
            ):
                raise ValueError(f"ErnieConfig.{key}: only plain RoPE is supported, got {rs!r}")
        act = d.get("hidden_act", "silu")
        if act not in ("silu", "swish"):
            raise ValueError(
                f"ErnieConfig.hidden_act: only 'silu' (SwiGLU) is supported, got {act!r}"
            )
        for f in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
        ):
            if kw.get(f) is None:
                raise ValueError(f"ErnieConfig.{f} is missing from the config")
        for f in ("rms_norm_eps", "rope_theta", "moe_norm_min"):
            if isinstance(kw.get(f), int) and not isinstance(kw.get(f), bool):
                kw[f] = float(kw[f])
        cfg = cls(**kw)
        cfg.extra = {k: v for k, v in d.items() if k not in names}
        return cfg

    @classmethod
    def from_file(cls, path) -> ErnieConfig:
        """Read ``path`` (a ``config.json`` or a directory holding one)."""
        p = Path(path)
        if p.is_dir():
            p = p / "config.json"
        try:
            d = json.loads(p.read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"ErnieConfig.from_file: no config file at {p}") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"ErnieConfig.from_file: {p} is not valid JSON: {e}") from None
        return cls.from_dict(d)

    def to_dict(self) -> dict:
        """A ``config.json``-compatible dict (``from_dict(to_dict())`` round-trips)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        if isinstance(d["eos_token_id"], list):
            d["eos_token_id"] = list(d["eos_token_id"])
        arch = "Ernie4_5_MoeForCausalLM" if self.is_moe else "Ernie4_5_ForCausalLM"
        d.update(
            torch_dtype=self.dtype,  # the key paddleformers reads and writes
            architectures=[arch],
            model_type="ernie4_5_moe" if self.is_moe else "ernie4_5",
            hidden_act="silu",
        )
        return d


# Every scalar field's type and range, checked in this order (ErnieConfig.validate).
_POSITIVE_INTS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "moe_layer_interval",
)
_NONNEG_INTS = (
    "moe_num_experts",
    "moe_intermediate_size",
    "moe_layer_start_index",
    "moe_num_shared_experts",
    "num_nextn_predict_layers",
    "bos_token_id",
    "pad_token_id",
    "moe_k",
)
_POSITIVE_FLOATS = ("rms_norm_eps", "rope_theta", "moe_norm_min")
_BOOLS = ("tie_word_embeddings", "use_bias", "moe_use_aux_free")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_field_types(cfg) -> None:
    """ValueError naming the first field of the tables above whose value is not of its kind."""
    for name in _POSITIVE_INTS:
        v = getattr(cfg, name)
        if not _is_int(v) or v <= 0:
            raise ValueError(f"ErnieConfig.{name} must be a positive int, got {v!r}")
    for name in _NONNEG_INTS:
        v = getattr(cfg, name)
        if not _is_int(v) or v < 0:
            raise ValueError(f"ErnieConfig.{name} must be a non-negative int, got {v!r}")
    for name in _POSITIVE_FLOATS:
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"ErnieConfig.{name} must be a positive finite number, got {v!r}")
    for name in _BOOLS:
        if not isinstance(getattr(cfg, name), bool):
            raise ValueError(f"ErnieConfig.{name} must be a bool, got {getattr(cfg, name)!r}")
