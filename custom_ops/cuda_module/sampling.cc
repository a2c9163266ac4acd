// fd_mtp_cuda bindings of the sampling ops (spec §5.5 and §5.6).
#include "common.h"

namespace fd_mtp {
namespace pybind {

void bind_sampling(py::module_& m) {
  // ------------------------------------------- token penalty multi scores ---
  {
    using P = TokenPenaltyParams;
    py::class_<P> c(m, "TokenPenaltyParams");
    c.def(py::init([]() { return P{}; }));
    pointer_field(c, "pre_ids", &P::pre_ids);
    c.def_readwrite("pre_ids_cols", &P::pre_ids_cols);
    pointer_field(c, "logits", &P::logits);
    c.def_readwrite("rows", &P::rows);
    c.def_readwrite("vocab", &P::vocab);
    c.def_property(
        "float_kind", [](const P& s) { return static_cast<int>(s.float_kind); },
        [](P& s, int v) {
          if (v < 0 || v > 2) throw std::invalid_argument("float_kind must be 0, 1 or 2");
          s.float_kind = static_cast<FloatKind>(v);
        });
    pointer_field(c, "penalty_scores", &P::penalty_scores);
    pointer_field(c, "frequency_scores", &P::frequency_scores);
    pointer_field(c, "presence_scores", &P::presence_scores);
    pointer_field(c, "temperatures", &P::temperatures);
    pointer_field(c, "bad_tokens", &P::bad_tokens);
    c.def_readwrite("num_bad_tokens", &P::num_bad_tokens);
    pointer_field(c, "cur_len", &P::cur_len);
    pointer_field(c, "min_len", &P::min_len);
    pointer_field(c, "eos_token_id", &P::eos_token_id);
    c.def_readwrite("num_eos", &P::num_eos);
    pointer_field(c, "output_padding_offset", &P::output_padding_offset);
    pointer_field(c, "output_cum_offsets", &P::output_cum_offsets);
    c.def_readwrite("bs", &P::bs);
    c.def_readwrite("max_seq_len", &P::max_seq_len);
    m.def("token_penalty_workspace_rows", &token_penalty_workspace_rows, py::arg("rows"),
          "Rows of the [rows, vocab] int32 zero workspace token_penalty needs.");
    m.def("token_penalty", [](const P& p, uintptr_t workspace, int64_t workspace_rows,
                              uintptr_t status, uintptr_t stream) {
      constexpr const char* op = "speculate_get_token_penalty_multi_scores";
      require(status, op, "status");
      if (p.rows > 0) require(workspace, op, "workspace");
      throw_if(token_penalty_cuda(p, as_ptr<int32_t>(workspace), workspace_rows,
                                  as_ptr<KernelStatus>(status), as_stream(stream)),
               op);
      return status_tuple(fetch_status(status, stream, op));
    }, py::arg("params"), py::arg("workspace"), py::arg("workspace_rows"), py::arg("status"),
       py::arg("stream") = 0,
       "workspace: [workspace_rows, vocab] int32, zero (left zero). "
       "Returns (code, request, value, limit).");
  }

  // ------------------------------------------------------ top_p_candidates ---
  {
    using P = TopPCandidatesParams;
    py::class_<P> c(m, "TopPCandidatesParams");
    c.def(py::init([]() { return P{}; }));
    pointer_field(c, "probs", &P::probs);
    c.def_readwrite("rows", &P::rows);
    c.def_readwrite("vocab", &P::vocab);
    c.def_property(
        "float_kind", [](const P& s) { return static_cast<int>(s.float_kind); },
        [](P& s, int v) {
          if (v < 0 || v > 2) throw std::invalid_argument("float_kind must be 0, 1 or 2");
          s.float_kind = static_cast<FloatKind>(v);
        });
    pointer_field(c, "top_p", &P::top_p);
    c.def_readwrite("bs", &P::bs);
    pointer_field(c, "output_padding_offset", &P::output_padding_offset);
    c.def_readwrite("candidates", &P::candidates);
    c.def_readwrite("max_seq_len", &P::max_seq_len);
    pointer_field(c, "verify_scores", &P::verify_scores);
    pointer_field(c, "verify_tokens", &P::verify_tokens);
    pointer_field(c, "actual_candidate_lens", &P::actual_candidate_lens);
    m.def("top_p_candidates", [](const P& p, uintptr_t status, uintptr_t stream) {
      constexpr const char* op = "top_p_candidates";
      require(status, op, "status");
      throw_if(top_p_candidates_cuda(p, as_ptr<KernelStatus>(status), as_stream(stream)), op);
      return status_tuple(fetch_status(status, stream, op));
    }, py::arg("params"), py::arg("status"), py::arg("stream") = 0,
       "Returns (code, request, value, limit).");
  }
}

}  // namespace pybind
}  // namespace fd_mtp
