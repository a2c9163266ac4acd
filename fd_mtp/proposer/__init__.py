"""Draft proposers and their factory.

* `MTPProposer` (`mtp`): the model's MTP head; `EagleProposer` (`eagle`): a separate EAGLE /
  EAGLE-3 head (both on the shared `DraftModelProposer`); `NgramProposer` (`ngram`): prompt /
  history lookup.
* `make_proposer`: the factory the speculative runner calls with its `SpeculativeConfig` and its
  `fd_mtp.batch.InputBatch`; what it returns satisfies the `fd_mtp.batch.Proposer` protocol.

Layer: below the engine (which calls the factory), above ``fd_mtp.batch`` (the shared batch types:
`Task`, `InputBatch`, `pack_step`, `Proposer`, `ProposerStats`), ``fd_mtp.model`` and ``fd_mtp.ops``.
"""

from __future__ import annotations

from ..batch import InputBatch, Proposer, ProposerStats
from ..config import SpeculativeConfig
from .eagle import EagleProposer
from .mtp import DraftModelProposer, MTPProposer
from .ngram import NgramProposer

__all__ = [
    "PROPOSERS",
    "DraftModelProposer",
    "EagleProposer",
    "MTPProposer",
    "NgramProposer",
    "Proposer",
    "ProposerStats",
    "make_proposer",
]


def _draft_model(cls):
    """The builder of a draft-model proposer (`MTPProposer`, `EagleProposer`): the draft model
    goes positionally, every other argument as the factory got it."""

    def build(cfg, input_batch, *, mtp_model, **options):
        return cls(cfg, mtp_model, input_batch, **options)

    return build


def _ngram(
    cfg,
    input_batch,
    *,
    max_model_len,
    mtp_model=None,
    block_size=None,
    num_main_blocks=None,
    draft_end_ids=None,
    **options,
):
    return NgramProposer(cfg, input_batch, max_model_len=max_model_len, **options)


#: ``SpeculativeConfig.method`` -> builder
PROPOSERS = {
    "mtp": _draft_model(MTPProposer),
    "eagle": _draft_model(EagleProposer),
    "eagle3": _draft_model(EagleProposer),
    "ngram": _ngram,
}


def make_proposer(
    speculative_config: SpeculativeConfig,
    input_batch: InputBatch,
    *,
    mtp_model=None,
    max_model_len: int,
    block_size: int,
    num_main_blocks: int,
    draft_end_ids=None,
    **options,
) -> Proposer:
    """The drafter of ``speculative_config.method`` for the runner owning ``input_batch``.

    Args:
        speculative_config: a `SpeculativeConfig` (parsed once by the caller).
        input_batch: the runner's `InputBatch` (the target's ``share_inputs`` are its ``tensors``).
        mtp_model: the draft model: the ``Ernie4_5MTP`` (method "mtp") or the
            `fd_mtp.model.eagle.EagleHead` (methods "eagle", "eagle3").
        max_model_len, block_size, num_main_blocks: the runner's (block size and block count of
            the target's KV cache).
        draft_end_ids: the ``end_ids`` of ``draft_model_update`` (method "mtp").
        **options: method-specific keyword arguments (`MTPProposer`: role, scheduler, tp_broadcast,
            ...; `NgramProposer`: threshold).
    """
    if not isinstance(speculative_config, SpeculativeConfig):
        raise ValueError(
            f"make_proposer: speculative_config must be a SpeculativeConfig, got "
            f"{type(speculative_config).__name__}"
        )
    build = PROPOSERS.get(speculative_config.method)
    if build is None:
        raise ValueError(
            f"make_proposer: no proposer for method {speculative_config.method!r}; "
            f"known: {sorted(PROPOSERS)}"
        )
    return build(
        speculative_config,
        input_batch,
        mtp_model=mtp_model,
        max_model_len=max_model_len,
        block_size=block_size,
        num_main_blocks=num_main_blocks,
        draft_end_ids=draft_end_ids,
        **options,
    )
