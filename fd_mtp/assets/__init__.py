"""Data files shipped with fd_mtp.

``DEMO_MODEL``: a tiny ERNIE-4.5 with an MTP block (``num_nextn_predict_layers = 1``), trained on
the Python standard library's sources by ``tools/train_demo_model.py``, in the ERNIE-4.5 checkpoint
layout (config.json, model.safetensors, tokenizer.model; see its README.md). Load it with
``fd_mtp.model.load_checkpoint(default_model_path())``.

``DEMO_EAGLE3_HEAD``: an EAGLE-3 draft head for ``DEMO_MODEL``, trained against it on the same
corpus by ``tools/train_eagle_head.py`` (`fd_mtp.model.eagle`'s layout; see its README.md). Use it
with ``speculative_config={"method": "eagle3", "model": str(default_eagle3_head_path())}``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "DEMO_EAGLE3_HEAD",
    "DEMO_MODEL",
    "EAGLE3_TRAIN_COMMAND",
    "TRAIN_COMMAND",
    "default_eagle3_head_path",
    "default_model_path",
]

DEMO_MODEL = Path(__file__).parent / "ernie45_tiny_mtp"
TRAIN_COMMAND = "python tools/train_demo_model.py --out runs/demo"
DEMO_EAGLE3_HEAD = Path(__file__).parent / "ernie45_tiny_eagle3"
EAGLE3_TRAIN_COMMAND = "python tools/train_eagle_head.py --out runs/eagle3"


def default_model_path() -> Path:
    """The demo checkpoint directory :data:`DEMO_MODEL`.

    Raises:
        FileNotFoundError: the directory (or its config.json / model.safetensors) is missing, e.g. in
            a source checkout where it has not been trained yet; the message names the command that
            writes it.
    """
    missing = [
        n
        for n in ("config.json", "model.safetensors", "tokenizer.model")
        if not (DEMO_MODEL / n).is_file()
    ]
    if missing:
        raise FileNotFoundError(
            f"demo checkpoint {DEMO_MODEL} is missing {', '.join(missing)}; train it (about an hour on "
            f"a 2-core CPU) from the repository root with: {TRAIN_COMMAND}"
        )
    return DEMO_MODEL


def default_eagle3_head_path() -> Path:
    """The demo model's EAGLE-3 head directory :data:`DEMO_EAGLE3_HEAD`.

    Raises:
        FileNotFoundError: the directory (or its config.json / model.safetensors) is missing; the
            message names the command that writes it.
    """
    missing = [
        n for n in ("config.json", "model.safetensors") if not (DEMO_EAGLE3_HEAD / n).is_file()
    ]
    if missing:
        raise FileNotFoundError(
            f"demo EAGLE-3 head {DEMO_EAGLE3_HEAD} is missing {', '.join(missing)}; train it (under "
            f"an hour on a 2-core CPU) from the repository root with: {EAGLE3_TRAIN_COMMAND}"
        )
    return DEMO_EAGLE3_HEAD
