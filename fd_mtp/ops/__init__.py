"""fd_mtp's speculative-decoding ops, with FastDeploy release/2.4 signatures.

Every op takes its arguments positionally in FastDeploy's order and writes the
arguments its docstring marks "written" in place. Bad input raises ValueError
naming the argument. The compiled library is loaded on the first call.

One module per schema family (fd_mtp/schema/<family>.py): an op whose wrapper needs no
Python-side code is generated from its schema, docstring included; the others are written in
their family module. This package offers every name in each family module's ``__all__``.
"""

import importlib as _importlib

from ..schema import FAMILIES as _FAMILIES
from ._loader import check_pending, load, set_error_mode

__all__ = ["check_pending", "load", "set_error_mode"]
for _family in _FAMILIES:
    _module = _importlib.import_module(f"{__name__}.{_family}")
    for _name in _module.__all__:
        globals()[_name] = getattr(_module, _name)
        __all__.append(_name)
del _family, _module, _name
