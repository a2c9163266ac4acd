"""The CPU driver of ngram_match / hybrid_mtp_ngram reached through the CUDA module
(fd_mtp.cuda.ngram_match_host / hybrid_mtp_ngram_host, no paddle): what the GPU machine uses as
"the CPU op". Same results as the reference; same data checks. Skipped when fd_mtp_cuda is not
built (it needs no GPU)."""

from __future__ import annotations

import numpy as np
import pytest
from ngram_util import HYBRID_NAMES, NGRAM_NAMES, random_batch
from util import assert_same

import fd_mtp.reference as reference

fcuda = pytest.importorskip("fd_mtp.cuda")
try:
    fcuda.load()
except ImportError as exc:  # pragma: no cover - depends on the build
    pytest.skip(f"fd_mtp_cuda is not built: {exc}", allow_module_level=True)


@pytest.mark.parametrize("bsz", [1, 33, 257])
@pytest.mark.parametrize("hybrid", [False, True])
def test_host_driver_matches_reference(bsz, hybrid):
    rng = np.random.default_rng(bsz + hybrid)
    d = random_batch(rng, bsz, hybrid=hybrid, k=3, max_n=3, width=64, vocab=20)
    names = HYBRID_NAMES if hybrid else NGRAM_NAMES
    sizes = (3, 2, 3) if hybrid else (3, 3)
    host = {n: d[n].copy() for n in names}
    ref = {n: d[n].copy() for n in names}
    op = fcuda.hybrid_mtp_ngram_host if hybrid else fcuda.ngram_match_host
    refop = reference.hybrid_mtp_ngram if hybrid else reference.ngram_match
    op(*[host[n] for n in names], *sizes, threshold=8 * bsz)
    refop(*[ref[n] for n in names], *sizes, threshold=8 * bsz)
    for n in names:
        assert_same(host[n], ref[n], n)
    if bsz > 1:  # something drafted
        assert np.any(host["seq_lens_this_time"] != d["seq_lens_this_time"])


def test_host_driver_bad_input_writes_nothing():
    rng = np.random.default_rng(0)
    d = random_batch(rng, 20, k=3, max_n=3, width=16, plant=1.0)
    d["step_idx"][:] = np.minimum(d["step_idx"], 10)
    d["seq_lens_encoder"][:] = 0
    d["seq_lens_decoder"][:] = 5
    d["max_dec_len"][:] = 1000
    d["draft_token_num"][:] = 3
    d["step_idx"][-1] = 16  # == pre_ids columns
    host = {n: d[n].copy() for n in NGRAM_NAMES}
    with pytest.raises(ValueError, match="step_idx"):
        fcuda.ngram_match_host(*[host[n] for n in NGRAM_NAMES], 3, 3, threshold=10_000)
    for n in NGRAM_NAMES:
        assert_same(host[n], d[n], n)
    with pytest.raises(ValueError, match="min_ngram_size"):
        fcuda.hybrid_mtp_ngram_host(*[host[n] for n in HYBRID_NAMES], 2, 3, 3)
