// fd_mtp_cuda bindings of the n-gram drafting ops (spec §5.17 ngram_match, §6.7 hybrid_mtp_ngram).
#include "common.h"

namespace fd_mtp {
namespace pybind {

void bind_ngram(py::module_& m) {
  using P = NgramParams;
  py::class_<P> c(m, "NgramParams");
  c.def(py::init([]() { return P{}; }));
  pointer_field(c, "input_ids", &P::input_ids);
  c.def_readwrite("input_ids_cols", &P::input_ids_cols);
  pointer_field(c, "input_ids_len", &P::input_ids_len);
  pointer_field(c, "pre_ids", &P::pre_ids);
  c.def_readwrite("pre_ids_cols", &P::pre_ids_cols);
  pointer_field(c, "step_idx", &P::step_idx);
  pointer_field(c, "draft_token_num", &P::draft_token_num);
  pointer_field(c, "draft_tokens", &P::draft_tokens);
  c.def_readwrite("draft_tokens_cols", &P::draft_tokens_cols);
  pointer_field(c, "seq_lens_this_time", &P::seq_lens_this_time);
  pointer_field(c, "seq_lens_encoder", &P::seq_lens_encoder);
  pointer_field(c, "seq_lens_decoder", &P::seq_lens_decoder);
  pointer_field(c, "max_dec_len", &P::max_dec_len);
  c.def_readwrite("bsz", &P::bsz);
  c.def_readwrite("max_ngram_size", &P::max_ngram_size);
  c.def_readwrite("min_ngram_size", &P::min_ngram_size);
  c.def_readwrite("max_draft_tokens", &P::max_draft_tokens);
  c.def_readwrite("threshold", &P::threshold);
  c.def_readwrite("hybrid", &P::hybrid);

  m.def("ngram", [](const P& p, uintptr_t hits, uintptr_t status, uintptr_t stream) {
    constexpr const char* op = "ngram";
    require(hits, op, "hits");
    require(status, op, "status");
    throw_if(ngram_cuda(p, as_ptr<int64_t>(hits), as_ptr<KernelStatus>(status), as_stream(stream)),
             op);
    return status_tuple(fetch_status(status, stream, op));
  }, py::arg("params"), py::arg("hits"), py::arg("status"), py::arg("stream") = 0,
     "ngram_match (params.hybrid false) or hybrid_mtp_ngram (true) on device pointers. "
     "hits: [max(bsz, 1)] int64 workspace. Returns (code, request, value, limit).");

  // The CPU driver on host pointers (e.g. numpy arrays' addresses): the CPU op
  // without paddle, so that a paddle-less GPU machine can compare and time it.
  m.def("ngram_host", [](const P& p) {
    KernelStatus st{};
    {
      py::gil_scoped_release release;
      st = ngram_cpu(p);
    }
    return status_tuple(st);
  }, py::arg("params"),
     "The CPU driver of ngram_match / hybrid_mtp_ngram on HOST pointers. "
     "Returns (code, request, value, limit).");
}

}  // namespace pybind
}  // namespace fd_mtp
