"""The docstring examples of the engine modules run as written."""
import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["fd_mtp.engine.block_manager", "fd_mtp.engine.sampler",
                                  "fd_mtp.engine.sampling_params"])
def test_docstring_examples(name):
    if name.endswith("sampler"):
        pytest.importorskip("paddle")
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
