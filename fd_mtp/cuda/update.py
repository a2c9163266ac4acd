"""fd_mtp.cuda versions of the target-side update ops (spec §5.8, §5.10, §5.12, §5.16): all of
standard dispatch, so every wrapper is generated from the schema (fd_mtp/schema/update.py)."""

from __future__ import annotations

from ._common import define_launchers

__all__ = define_launchers(globals(), "update")
