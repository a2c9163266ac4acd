// fd_mtp_cuda bindings of the packed-layout ops (spec §5.1-§5.4).
#include "common.h"

namespace fd_mtp {
namespace pybind {

void bind_packing(py::module_& m) {
  // -------------------------------------------- speculate_get_padding_offset ---
  {
    using P = PaddingOffsetParams;
    py::class_<P> c(m, "PaddingOffsetParams");
    c.def(py::init([]() { return P{}; }));
    pointer_field(c, "input_ids", &P::input_ids);
    c.def_readwrite("input_ids_cols", &P::input_ids_cols);
    pointer_field(c, "draft_tokens", &P::draft_tokens);
    c.def_readwrite("draft_tokens_cols", &P::draft_tokens_cols);
    pointer_field(c, "cum_offsets", &P::cum_offsets);
    pointer_field(c, "seq_len", &P::seq_len);
    pointer_field(c, "seq_lens_encoder", &P::seq_lens_encoder);
    c.def_readwrite("bsz", &P::bsz);
    c.def_readwrite("token_num", &P::token_num);
    pointer_field(c, "x_remove_padding", &P::x_remove_padding);
    pointer_field(c, "batch_id_per_token", &P::batch_id_per_token);
    pointer_field(c, "cu_seqlens_q", &P::cu_seqlens_q);
    pointer_field(c, "cu_seqlens_k", &P::cu_seqlens_k);
    m.def("speculate_get_padding_offset", [](const P& p, uintptr_t status, uintptr_t total,
                                             uintptr_t stream) {
      constexpr const char* op = "speculate_get_padding_offset";
      require(status, op, "status");
      require(total, op, "total");
      throw_if(speculate_get_padding_offset_cuda(p, as_ptr<KernelStatus>(status),
                                                 as_ptr<int64_t>(total), as_stream(stream)),
               op);
      return status_tuple(fetch_status(status, stream, op));
    }, py::arg("params"), py::arg("status"), py::arg("total"), py::arg("stream") = 0,
       "total: int64 scratch (sum of seq_len). Returns (code, request, value, limit); "
       "the outputs are written only when code is 0.");
  }

  // ------------------------------------------- speculate_get_seq_lens_output ---
  {
    using P = SeqLensOutputParams;
    py::class_<P> c(m, "SeqLensOutputParams");
    c.def(py::init([]() { return P{}; }));
    pointer_field(c, "seq_lens_this_time", &P::seq_lens_this_time);
    pointer_field(c, "seq_lens_encoder", &P::seq_lens_encoder);
    pointer_field(c, "seq_lens_output", &P::seq_lens_output);
    c.def_readwrite("bsz", &P::bsz);
    m.def("speculate_get_seq_lens_output", [](const P& p, uintptr_t stream) {
      throw_if(speculate_get_seq_lens_output_cuda(p, as_stream(stream)),
               "speculate_get_seq_lens_output");
      sync(stream, "speculate_get_seq_lens_output");
    }, py::arg("params"), py::arg("stream") = 0);
  }

  // ------------------------------------- speculate_get_output_padding_offset ---
  {
    using P = OutputPaddingOffsetParams;
    py::class_<P> c(m, "OutputPaddingOffsetParams");
    c.def(py::init([]() { return P{}; }));
    pointer_field(c, "output_cum_offsets_tmp", &P::output_cum_offsets_tmp);
    pointer_field(c, "seq_lens_output", &P::seq_lens_output);
    c.def_readwrite("bsz", &P::bsz);
    c.def_readwrite("max_seq_len", &P::max_seq_len);
    c.def_readwrite("out_token_num", &P::out_token_num);
    pointer_field(c, "output_padding_offset", &P::output_padding_offset);
    pointer_field(c, "output_cum_offsets", &P::output_cum_offsets);
    m.def("speculate_get_output_padding_offset", [](const P& p, uintptr_t status,
                                                    uintptr_t total, uintptr_t stream) {
      constexpr const char* op = "speculate_get_output_padding_offset";
      require(status, op, "status");
      require(total, op, "total");
      throw_if(speculate_get_output_padding_offset_cuda(p, as_ptr<KernelStatus>(status),
                                                        as_ptr<int64_t>(total),
                                                        as_stream(stream)),
               op);
      return status_tuple(fetch_status(status, stream, op));
    }, py::arg("params"), py::arg("status"), py::arg("total"), py::arg("stream") = 0,
       "total: int64 scratch (sum of seq_lens_output). Returns (code, request, value, limit); "
       "the outputs are written only when code is 0.");
  }

  // --------------------------------------------------------- rebuild_padding ---
  {
    using P = RebuildPaddingParams;
    py::class_<P> c(m, "RebuildPaddingParams");
    c.def(py::init([]() { return P{}; }));
    pointer_field(c, "tmp_out", &P::tmp_out);
    c.def_readwrite("tmp_rows", &P::tmp_rows);
    c.def_readwrite("row_bytes", &P::row_bytes);
    pointer_field(c, "cu_seqlens_q", &P::cu_seqlens_q);
    pointer_field(c, "seq_len_this_time", &P::seq_len_this_time);
    pointer_field(c, "seq_lens_decoder", &P::seq_lens_decoder);
    pointer_field(c, "seq_lens_encoder", &P::seq_lens_encoder);
    pointer_field(c, "output_padding_offset", &P::output_padding_offset);
    c.def_readwrite("bsz", &P::bsz);
    c.def_readwrite("max_input_length", &P::max_input_length);
    c.def_readwrite("out_rows", &P::out_rows);
    pointer_field(c, "out", &P::out);
    m.def("rebuild_padding", [](const P& p, uintptr_t status, uintptr_t stream) {
      constexpr const char* op = "rebuild_padding";
      require(status, op, "status");
      if (p.output_padding_offset != nullptr && p.max_input_length < 1)
        throw std::invalid_argument("rebuild_padding: max_input_length must be >= 1");
      throw_if(rebuild_padding_cuda(p, as_ptr<KernelStatus>(status), as_stream(stream)), op);
      return status_tuple(fetch_status(status, stream, op));
    }, py::arg("params"), py::arg("status"), py::arg("stream") = 0,
       "params.output_padding_offset = 0 selects the plain branch (out_rows = bsz). "
       "Returns (code, request, value, limit); out is written only when code is 0.");
  }
}

}  // namespace pybind
}  // namespace fd_mtp
