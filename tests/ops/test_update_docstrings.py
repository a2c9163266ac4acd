"""The >>> examples in the docstrings of fd_mtp.ops.update run and print exactly what they show."""

import doctest

import fd_mtp.ops.update as update


def test_docstring_examples():
    result = doctest.testmod(update, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.attempted >= 20, result
    assert result.failed == 0, result
