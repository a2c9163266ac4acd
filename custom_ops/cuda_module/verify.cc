// fd_mtp_cuda bindings of the target-side verify op (spec §5.7) and of the
// Philox4x32-10 generator it draws from.
#include "common.h"

namespace fd_mtp {
namespace pybind {

void bind_verify(py::module_& m) {
  using P = SpeculateVerifyParams;
  py::class_<P> c(m, "SpeculateVerifyParams");
  c.def(py::init([]() { return P{}; }));
  pointer_field(c, "sampled_token_ids", &P::sampled_token_ids);
  c.def_readwrite("sampled_rows", &P::sampled_rows);
  pointer_field(c, "accept_tokens", &P::accept_tokens);
  c.def_readwrite("accept_cols", &P::accept_cols);
  pointer_field(c, "accept_num", &P::accept_num);
  pointer_field(c, "step_idx", &P::step_idx);
  pointer_field(c, "stop_flags", &P::stop_flags);
  pointer_field(c, "seq_lens_encoder", &P::seq_lens_encoder);
  pointer_field(c, "draft_tokens", &P::draft_tokens);
  c.def_readwrite("draft_cols", &P::draft_cols);
  pointer_field(c, "seq_lens_this_time", &P::seq_lens_this_time);
  pointer_field(c, "verify_tokens", &P::verify_tokens);
  c.def_readwrite("verify_rows", &P::verify_rows);
  pointer_field(c, "verify_scores", &P::verify_scores);
  c.def_readwrite("score_rows", &P::score_rows);
  c.def_readwrite("num_candidates", &P::num_candidates);
  pointer_field(c, "max_dec_len", &P::max_dec_len);
  pointer_field(c, "end_tokens", &P::end_tokens);
  c.def_readwrite("num_end_tokens", &P::num_end_tokens);
  pointer_field(c, "is_block_step", &P::is_block_step);
  pointer_field(c, "output_cum_offsets", &P::output_cum_offsets);
  pointer_field(c, "actual_candidate_len", &P::actual_candidate_len);
  c.def_readwrite("candidate_len_rows", &P::candidate_len_rows);
  pointer_field(c, "topp", &P::topp);
  pointer_field(c, "target_probs", &P::target_probs);
  c.def_readwrite("target_rows", &P::target_rows);
  pointer_field(c, "draft_probs", &P::draft_probs);
  c.def_readwrite("draft_prob_rows", &P::draft_prob_rows);
  c.def_readwrite("vocab", &P::vocab);
  c.def_readwrite("bsz", &P::bsz);
  c.def_readwrite("max_seq_len", &P::max_seq_len);
  c.def_readwrite("verify_window", &P::verify_window);
  c.def_readwrite("seed", &P::seed);
  c.def_readwrite("offset", &P::offset);
  c.def_readwrite("strategy", &P::strategy);
  c.def_readwrite("enable_topp", &P::enable_topp);
  c.def_readwrite("benchmark_mode", &P::benchmark_mode);
  c.def_readwrite("accept_all_drafts", &P::accept_all_drafts);
  c.def_readwrite("prefill_one_step_stop", &P::prefill_one_step_stop);
  m.def("speculate_verify", [](const P& p, uintptr_t status, uintptr_t stream) {
    constexpr const char* op = "speculate_verify";
    require(status, op, "status");
    throw_if(speculate_verify_cuda(p, as_ptr<KernelStatus>(status), as_stream(stream)), op);
    return status_tuple(fetch_status(status, stream, op));
  }, py::arg("params"), py::arg("status"), py::arg("stream") = 0,
     "Returns (code, request, value, limit); code 0: fine.");

  m.def("philox4x32_10", [](uintptr_t input, uintptr_t output, int64_t n, uintptr_t stream) {
    constexpr const char* op = "philox4x32_10";
    if (n > 0) {
      require(input, op, "input");
      require(output, op, "output");
    }
    throw_if(philox4x32_10_cuda(as_ptr<const uint32_t>(input), as_ptr<uint32_t>(output), n,
                                as_stream(stream)),
             op);
    sync(stream, op);
  }, py::arg("input"), py::arg("output"), py::arg("n"), py::arg("stream") = 0,
     "output[i, 0:4] = Philox4x32-10(counter = input[i, 0:4], key = input[i, 4:6]) (uint32).");
}

}  // namespace pybind
}  // namespace fd_mtp
