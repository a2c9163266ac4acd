"""Data files shipped with fd_mtp.

``DEMO_MODEL``: a tiny ERNIE-4.5 with an MTP block (``num_nextn_predict_layers = 1``), trained on
the Python standard library's sources by ``tools/train_demo_model.py``, in the ERNIE-4.5 checkpoint
layout (config.json, model.safetensors, tokenizer.model; see its README.md). Load it with
``fd_mtp.model.load_checkpoint(default_model_path())``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DEMO_MODEL", "TRAIN_COMMAND", "default_model_path"]

DEMO_MODEL = Path(__file__).parent / "ernie45_tiny_mtp"
TRAIN_COMMAND = "python tools/train_demo_model.py --out runs/demo"


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
