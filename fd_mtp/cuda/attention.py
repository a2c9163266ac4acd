"""fd_mtp.cuda version of ``fd_mtp.ops.paged_attention`` (the float32 paged KV-cache attention of
fd_mtp.model) on CuPy arrays, generated from its schema (fd_mtp/schema/attention.py). Errors
follow fd_mtp.cuda's error mode (no sync by default; docs/gpu_errors.md)."""

from __future__ import annotations

from ._common import define_launchers

__all__ = define_launchers(globals(), "attention")
