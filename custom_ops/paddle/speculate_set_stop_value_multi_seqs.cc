// fd_mtp_speculate_set_stop_value_multi_seqs (spec §5.8). Arguments, checks, registration and the
// dispatch: fd_mtp/schema/update.py (generated into speculate_set_stop_value_multi_seqs.gen.h /
// .gen.cc). Here: the two forms of the stop sequences, which no tensor spec expresses (the same
// rule as fd_mtp.schema.update.stop_seqs_layout).
#include "speculate_set_stop_value_multi_seqs.gen.h"

// stop_seqs: [>=bs, S, Ls] with stop_seqs_len [>=bs, S], or [>=bs, Ls] (one stop sequence per
// request, S = 1) with stop_seqs_len [>=bs] or [>=bs, 1].
void speculate_set_stop_value_multi_seqs_check(SpeculateSetStopValueMultiSeqsArgs& a,
                                               fd_mtp::SetStopValueParams& p) {
  using namespace fd_mtp;
  const std::vector<int64_t> seqs = a.stop_seqs.shape();
  const std::vector<int64_t> lens = a.stop_seqs_len.shape();
  const int64_t bs = a.dims.B;
  if (seqs.size() != 2 && seqs.size() != 3)
    check::fail(a.op, "stop_seqs",
                "must have shape [bs, S, Ls] or [bs, Ls] (one stop sequence per request), got ",
                check::shape_str(seqs));
  if (seqs[0] < bs)
    check::fail(a.op, "stop_seqs", "has ", seqs[0], " rows but accept_tokens has ", bs);
  const int64_t n = seqs.size() == 3 ? seqs[1] : 1;
  const bool ok = (lens.size() == 1 && n == 1) || (lens.size() == 2 && lens[1] == n);
  if (!ok)
    check::fail(a.op, "stop_seqs_len", "must have shape [bs, ", n, "]", n == 1 ? " or [bs]" : "",
                " for stop_seqs of shape ", check::shape_str(seqs), ", got ",
                check::shape_str(lens));
  if (lens[0] < bs)
    check::fail(a.op, "stop_seqs_len", "has ", lens[0], " rows but accept_tokens has ", bs);
  p.num_stop_seqs = n;
  p.stop_seq_cols = seqs.back();
}
