"""fd_mtp.cuda versions of the logprob helpers (spec §5.18): all of standard dispatch, so every
wrapper is generated from the schema (fd_mtp/schema/logprobs.py)."""

from __future__ import annotations

from ._common import define_launchers

__all__ = define_launchers(globals(), "logprobs")
