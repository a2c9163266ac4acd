"""fd_mtp.cuda versions of the draft-model ops (spec §6), every one generated from the schema
(fd_mtp/schema/draft.py)."""

from __future__ import annotations

from ._common import define_launchers

__all__ = define_launchers(globals(), "draft")
