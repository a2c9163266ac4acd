"""fd_mtp.cuda versions of the target-side block managers (spec §5.13-§5.15): every wrapper is
generated from the schema (fd_mtp/schema/blocks.py)."""

from __future__ import annotations

from ._common import define_launchers

__all__ = define_launchers(globals(), "blocks")
