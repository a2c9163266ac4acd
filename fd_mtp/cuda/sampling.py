"""fd_mtp.cuda versions of the target-side sampling ops (spec §5.5, §5.6): every wrapper is
generated from the schema (fd_mtp/schema/sampling.py).

Float arrays are CuPy float32 / float16 arrays, or uint16 arrays holding bfloat16 bit patterns
(as in fd_mtp.reference).
"""

from __future__ import annotations

from ._common import define_launchers

__all__ = define_launchers(globals(), "sampling")
