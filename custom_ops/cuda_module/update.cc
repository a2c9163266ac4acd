// fd_mtp_cuda bindings of the target-side update ops (spec §5.8, §5.10, §5.12, §5.16).
#include "common.h"

namespace fd_mtp {
namespace pybind {

void bind_update(py::module_& m) {
  // ------------------------------------------- set_stop_value_multi_seqs ---
  {
    using P = SetStopValueParams;
    py::class_<P> c(m, "SetStopValueParams");
    c.def(py::init([]() { return P{}; }));
    pointer_field(c, "accept_tokens", &P::accept_tokens);
    c.def_readwrite("accept_tokens_cols", &P::accept_tokens_cols);
    pointer_field(c, "accept_num", &P::accept_num);
    pointer_field(c, "pre_ids", &P::pre_ids);
    c.def_readwrite("pre_ids_cols", &P::pre_ids_cols);
    pointer_field(c, "step_idx", &P::step_idx);
    pointer_field(c, "stop_flags", &P::stop_flags);
    pointer_field(c, "stop_seqs", &P::stop_seqs);
    c.def_readwrite("num_stop_seqs", &P::num_stop_seqs);
    c.def_readwrite("stop_seq_cols", &P::stop_seq_cols);
    pointer_field(c, "stop_seqs_len", &P::stop_seqs_len);
    pointer_field(c, "end_ids", &P::end_ids);
    c.def_readwrite("bs", &P::bs);
    m.def("speculate_set_stop_value_multi_seqs", [](const P& p, uintptr_t status,
                                                    uintptr_t stream) {
      constexpr const char* op = "speculate_set_stop_value_multi_seqs";
      require(status, op, "status");
      throw_if(speculate_set_stop_value_multi_seqs_cuda(p, as_ptr<KernelStatus>(status),
                                                        as_stream(stream)),
               op);
      return status_tuple(fetch_status(status, stream, op));
    }, py::arg("params"), py::arg("status"), py::arg("stream") = 0,
       "Returns (code, request, value, limit).");
  }

  // ---------------------------------------------------- speculate_update ---
  {
    using P = SpeculateUpdateParams;
    py::class_<P> c(m, "SpeculateUpdateParams");
    c.def(py::init([]() { return P{}; }));
    pointer_field(c, "seq_lens_encoder", &P::seq_lens_encoder);
    pointer_field(c, "seq_lens_decoder", &P::seq_lens_decoder);
    pointer_field(c, "draft_tokens", &P::draft_tokens);
    c.def_readwrite("draft_tokens_cols", &P::draft_tokens_cols);
    pointer_field(c, "actual_draft_token_nums", &P::actual_draft_token_nums);
    pointer_field(c, "accept_tokens", &P::accept_tokens);
    c.def_readwrite("accept_tokens_cols", &P::accept_tokens_cols);
    pointer_field(c, "accept_num", &P::accept_num);
    pointer_field(c, "stop_flags", &P::stop_flags);
    pointer_field(c, "seq_lens_this_time", &P::seq_lens_this_time);
    pointer_field(c, "is_block_step", &P::is_block_step);
    pointer_field(c, "mask_rollback", &P::mask_rollback);
    c.def_readwrite("real_bsz", &P::real_bsz);
    c.def_readwrite("max_bsz", &P::max_bsz);
    m.def("speculate_update", [](const P& p, uintptr_t status, uintptr_t stopped,
                                 uintptr_t stream) {
      constexpr const char* op = "speculate_update";
      require(status, op, "status");
      require(stopped, op, "stopped");
      throw_if(speculate_update_cuda(p, as_ptr<KernelStatus>(status), as_ptr<int64_t>(stopped),
                                     as_stream(stream)),
               op);
      const KernelStatus st = fetch_status(status, stream, op);
      return py::make_tuple(status_tuple(st), fetch_int64(stopped, stream, op));
    }, py::arg("params"), py::arg("status"), py::arg("stopped"), py::arg("stream") = 0,
       "Returns ((code, request, value, limit), stopped): slots counted as stopped.");
  }

  // ---------------------------------- speculate_set_value_by_flags_and_idx ---
  {
    using P = SetValueByFlagsParams;
    py::class_<P> c(m, "SetValueByFlagsParams");
    c.def(py::init([]() { return P{}; }));
    pointer_field(c, "pre_ids_all", &P::pre_ids_all);
    c.def_readwrite("pre_ids_cols", &P::pre_ids_cols);
    pointer_field(c, "accept_tokens", &P::accept_tokens);
    c.def_readwrite("accept_tokens_cols", &P::accept_tokens_cols);
    pointer_field(c, "accept_num", &P::accept_num);
    pointer_field(c, "stop_flags", &P::stop_flags);
    pointer_field(c, "seq_lens_encoder", &P::seq_lens_encoder);
    pointer_field(c, "seq_lens_decoder", &P::seq_lens_decoder);
    pointer_field(c, "step_idx", &P::step_idx);
    c.def_readwrite("bs", &P::bs);
    m.def("speculate_set_value_by_flags_and_idx", [](const P& p, uintptr_t status,
                                                     uintptr_t stream) {
      constexpr const char* op = "speculate_set_value_by_flags_and_idx";
      require(status, op, "status");
      throw_if(speculate_set_value_by_flags_and_idx_cuda(p, as_ptr<KernelStatus>(status),
                                                         as_stream(stream)),
               op);
      return status_tuple(fetch_status(status, stream, op));
    }, py::arg("params"), py::arg("status"), py::arg("stream") = 0,
       "Returns (code, request, value, limit).");
  }

  // ------------------------------------------- speculate_clear_accept_nums ---
  {
    using P = ClearAcceptNumsParams;
    py::class_<P> c(m, "ClearAcceptNumsParams");
    c.def(py::init([]() { return P{}; }));
    pointer_field(c, "accept_num", &P::accept_num);
    pointer_field(c, "seq_lens_decoder", &P::seq_lens_decoder);
    c.def_readwrite("bsz", &P::bsz);
    m.def("speculate_clear_accept_nums", [](const P& p, uintptr_t stream) {
      throw_if(speculate_clear_accept_nums_cuda(p, as_stream(stream)), "speculate_clear_accept_nums");
      sync(stream, "speculate_clear_accept_nums");
    }, py::arg("params"), py::arg("stream") = 0);
  }
}

}  // namespace pybind
}  // namespace fd_mtp
