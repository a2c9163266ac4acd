"""Draft proposers: `MTPProposer` (the model's MTP head) and `NgramProposer` (prompt lookup)."""
from .mtp import MTPProposer, ProposerStats
from .ngram import NgramProposer

__all__ = ["MTPProposer", "NgramProposer", "ProposerStats"]
