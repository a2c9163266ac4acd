"""Bytes-moved floor of speculate_verify "rejection" on the GPU benchmark's inputs.

    python benchmarks/verify_rejection_floor.py [--bandwidth-tbs 4.3]

For each batch (1, 64, 256) and vocabulary (32000, 100000) of ``fd_mtp.testing.op_inputs``
(``build_verify_rejection``, a greedy and a sampling drafter) this replays each running request's
accept walk with the op's own draws (``fd_mtp.reference.verify``) and counts what the op must
move (its "plan": custom_ops/kernels/speculate_verify.h):

* the entries the walk tests: ``target_probs[row, d]`` (and ``draft_probs[row, d]``), one 32-byte
  sector each (a scattered read cannot move less);
* the one row it samples from: the target row (4 V bytes) and, for a residual with draft_probs,
  the draft row (4 V bytes);
* per-request metadata read and outputs written (draft row, lengths, flags, accept_tokens...).

``floor`` is that sum. ``kernel`` is what the CUDA kernel moves with fd_mtp.cuda's sample
workspace: the check pass reads each sampled row once (NaN / inf scan and chunk sums), re-reads
the found chunk (4 KiB per row read), keeps the token; the apply pass replays the walk and writes.
``no workspace`` is the launcher's path without one (the Paddle GPU branch's today): the check
pass scans the rows, the apply pass reads them again to sample. Times are bytes at the given copy
bandwidth (the H200's device-to-device copy reaches about 4.3 TB/s, README). Nothing is measured
here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fd_mtp.reference.verify import philox_uniform  # noqa: E402
from fd_mtp.testing import op_inputs  # noqa: E402

SECTOR = 32
CHUNK_BYTES = 1024 * 4


def plan_bytes(case):
    """(floor bytes, kernel bytes, no-workspace bytes, samples, residual samples) of one case."""
    a = dict(zip(case.names, case.args))
    kw = case.kwargs
    p, q = kw["target_probs"], kw.get("draft_probs")
    V = p.shape[1]
    seed, offset = kw["seed"], kw["offset"]
    flat = {k: np.asarray(v).reshape(-1) for k, v in a.items() if isinstance(v, np.ndarray)}
    bsz = flat["seq_lens_this_time"].size
    draft = a["draft_tokens"]
    ends = set(flat["end_tokens"].tolist())
    L = int(a["max_seq_len"])
    floor = kernel = twice = 0
    samples = residuals = 0
    for b in range(bsz):
        meta = 1 + 1 + 4  # is_block_step, stop_flags, seq_lens_this_time
        if flat["is_block_step"][b] or flat["stop_flags"][b]:
            floor += meta
            kernel += meta
            twice += meta
            continue
        n = int(flat["seq_lens_this_time"][b])
        start = b * L - int(flat["output_cum_offsets"][b])
        meta += 4 + 4 + 8 + 8 + 8 * draft.shape[1]  # enc, cum offset, step, max_dec, drafts
        walk = 0
        i, count, row, residual = 0, int(flat["step_idx"][b]), None, False
        prefill = a["benchmark_mode"] or flat["seq_lens_encoder"][b] != 0
        while not prefill and i < n - 1:
            d = int(draft[b, i + 1])
            r = start + i
            pv = p[r, d]
            qv = np.float32(1) if q is None else q[r, d]
            walk += SECTOR * (1 if q is None else 2)
            if not philox_uniform(seed, offset, b, 2 * i)[()] * qv <= pv:
                row, residual = r, True
                break
            count += 1
            if d in ends or count >= flat["max_dec_len"][b]:
                row = -1
                break
            i += 1
        if row is None:
            row = start + i
        emitted = i + 1
        writes = 8 * emitted + 4 + 8 + 1  # accept_tokens, accept_num, step_idx, stop_flags
        rows = 0
        if row >= 0:
            samples += 1
            residuals += residual
            rows = 4 * V * (2 if residual and q is not None else 1)
        rescan = CHUNK_BYTES * (rows // (4 * V)) if rows else 0
        floor += meta + walk + rows + writes
        # the apply pass replays the walk (its entries again, from the cache in practice)
        kernel += meta + 2 * walk + rows + rescan + writes
        twice += meta + 2 * walk + 2 * rows + rescan + writes
    return floor, kernel, twice, samples, residuals


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bandwidth-tbs", type=float, default=4.3)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 64, 256])
    args = ap.parse_args()
    bw = args.bandwidth_tbs * 1e12
    print(
        "| V | drafter | batch | samples (residual) | floor MB | floor us | kernel MB (ratio) "
        "| no workspace MB (ratio) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for V in (32_000, 100_000):
        for drafter in (False, True):
            for B in args.batches:
                case = op_inputs.build_verify_rejection(B, V, draft_probs=drafter)
                floor, kernel, twice, samples, residuals = plan_bytes(case)
                print(
                    f"| {V} | {'sampling' if drafter else 'greedy'} | {B} | {samples} "
                    f"({residuals}) | {floor / 1e6:.2f} | {floor / bw * 1e6:.1f} | "
                    f"{kernel / 1e6:.2f} ({kernel / floor:.2f}) | "
                    f"{twice / 1e6:.2f} ({twice / floor:.2f}) |"
                )


if __name__ == "__main__":
    main()
