"""The model-forward kernels on the CPU: paged KV-cache attention of one packed batch (the float32
kernel behind ``fd_mtp.model.attention.PagedAttentionCPU``) and a whole dense decoder layer (the
native forward, ``fd_mtp.model.native``)."""

from __future__ import annotations

from ._loader import define_ops

# Every op of this family is declared and documented in fd_mtp/schema/attention.py.
__all__ = define_ops(globals(), "attention")
