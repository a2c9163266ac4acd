"""Shared fixtures of the model tests: small random checkpoints (written once per session)."""

import pytest

from fd_mtp.testing import write_random_checkpoint


@pytest.fixture(scope="session")
def dense_ckpt(tmp_path_factory):
    """A tiny dense ERNIE-4.5 checkpoint with an MTP block (seed 3)."""
    return write_random_checkpoint(tmp_path_factory.mktemp("dense"), seed=3)


@pytest.fixture(scope="session")
def moe_ckpt(tmp_path_factory):
    """A tiny MoE checkpoint: 4 experts of width 32 (seed 4)."""
    return write_random_checkpoint(
        tmp_path_factory.mktemp("moe"), seed=4, moe_num_experts=4, moe_intermediate_size=32
    )
