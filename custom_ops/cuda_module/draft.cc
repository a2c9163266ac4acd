// fd_mtp_cuda bindings of the draft-model ops (spec §6).
#include "common.h"

namespace fd_mtp {
namespace pybind {

void bind_draft(py::module_& m) {
  // ------------------------------------------------------ preprocess ---
  {
    using P = DraftModelPreprocessParams;
    py::class_<P> c(m, "DraftModelPreprocessParams");
    c.def(py::init([]() { return P{}; }));
    pointer_field(c, "draft_tokens", &P::draft_tokens);
    c.def_readwrite("draft_tokens_cols", &P::draft_tokens_cols);
    pointer_field(c, "input_ids", &P::input_ids);
    c.def_readwrite("input_ids_cols", &P::input_ids_cols);
    pointer_field(c, "stop_flags", &P::stop_flags);
    pointer_field(c, "seq_lens_this_time", &P::seq_lens_this_time);
    pointer_field(c, "seq_lens_encoder", &P::seq_lens_encoder);
    pointer_field(c, "seq_lens_decoder", &P::seq_lens_decoder);
    pointer_field(c, "step_idx", &P::step_idx);
    pointer_field(c, "is_block_step", &P::is_block_step);
    pointer_field(c, "batch_drop", &P::batch_drop);
    pointer_field(c, "pre_ids", &P::pre_ids);
    c.def_readwrite("pre_ids_cols", &P::pre_ids_cols);
    pointer_field(c, "mask_rollback", &P::mask_rollback);
    pointer_field(c, "recompute_token_num", &P::recompute_token_num);
    pointer_field(c, "accept_tokens", &P::accept_tokens);
    c.def_readwrite("accept_tokens_cols", &P::accept_tokens_cols);
    pointer_field(c, "accept_num", &P::accept_num);
    pointer_field(c, "base_model_seq_lens_this_time", &P::base_model_seq_lens_this_time);
    pointer_field(c, "base_model_seq_lens_decoder", &P::base_model_seq_lens_decoder);
    pointer_field(c, "base_model_step_idx", &P::base_model_step_idx);
    pointer_field(c, "base_model_stop_flags", &P::base_model_stop_flags);
    pointer_field(c, "base_model_is_block_step", &P::base_model_is_block_step);
    pointer_field(c, "base_model_draft_tokens", &P::base_model_draft_tokens);
    c.def_readwrite("base_model_draft_tokens_cols", &P::base_model_draft_tokens_cols);
    c.def_readwrite("bsz", &P::bsz);
    c.def_readwrite("num_model_step", &P::num_model_step);
    c.def_readwrite("truncate_first_token", &P::truncate_first_token);
    c.def_readwrite("splitwise_prefill", &P::splitwise_prefill);
    c.def_readwrite("kvcache_scheduler_v1", &P::kvcache_scheduler_v1);
    m.def("draft_model_preprocess", [](const P& p, uintptr_t status, uintptr_t running,
                                       uintptr_t stream) {
      constexpr const char* op = "draft_model_preprocess";
      require(status, op, "status");
      require(running, op, "running");
      throw_if(draft_model_preprocess_cuda(p, as_ptr<KernelStatus>(status),
                                           as_ptr<int64_t>(running), as_stream(stream)),
               op);
      const KernelStatus st = fetch_status(status, stream, op);
      return py::make_tuple(status_tuple(st), fetch_int64(running, stream, op));
    }, py::arg("params"), py::arg("status"), py::arg("running"), py::arg("stream") = 0,
       "Returns ((code, request, value, limit), running): running = requests that draft.");
  }

  // ---------------------------------------------------------- update ---
  {
    using P = DraftModelUpdateParams;
    py::class_<P> c(m, "DraftModelUpdateParams");
    c.def(py::init([]() { return P{}; }));
    pointer_field(c, "inter_next_tokens", &P::inter_next_tokens);
    c.def_readwrite("num_next_tokens", &P::num_next_tokens);
    pointer_field(c, "draft_tokens", &P::draft_tokens);
    c.def_readwrite("draft_tokens_cols", &P::draft_tokens_cols);
    pointer_field(c, "pre_ids", &P::pre_ids);
    c.def_readwrite("pre_ids_cols", &P::pre_ids_cols);
    pointer_field(c, "seq_lens_this_time", &P::seq_lens_this_time);
    pointer_field(c, "seq_lens_encoder", &P::seq_lens_encoder);
    pointer_field(c, "seq_lens_decoder", &P::seq_lens_decoder);
    pointer_field(c, "step_idx", &P::step_idx);
    pointer_field(c, "output_cum_offsets", &P::output_cum_offsets);
    pointer_field(c, "stop_flags", &P::stop_flags);
    pointer_field(c, "max_dec_len", &P::max_dec_len);
    pointer_field(c, "end_ids", &P::end_ids);
    c.def_readwrite("num_end_ids", &P::num_end_ids);
    pointer_field(c, "base_model_draft_tokens", &P::base_model_draft_tokens);
    c.def_readwrite("base_model_draft_tokens_cols", &P::base_model_draft_tokens_cols);
    c.def_readwrite("bsz", &P::bsz);
    c.def_readwrite("max_seq_len", &P::max_seq_len);
    c.def_readwrite("substep", &P::substep);
    c.def_readwrite("prefill_one_step_stop", &P::prefill_one_step_stop);
    m.def("draft_model_update", [](const P& p, uintptr_t status, uintptr_t stopped,
                                   uintptr_t stream) {
      constexpr const char* op = "draft_model_update";
      require(status, op, "status");
      require(stopped, op, "stopped");
      throw_if(draft_model_update_cuda(p, as_ptr<KernelStatus>(status),
                                       as_ptr<int64_t>(stopped), as_stream(stream)),
               op);
      const KernelStatus st = fetch_status(status, stream, op);
      return py::make_tuple(status_tuple(st), fetch_int64(stopped, stream, op));
    }, py::arg("params"), py::arg("status"), py::arg("stopped"), py::arg("stream") = 0,
       "Returns ((code, request, value, limit), stopped): stopped = requests stopped after.");
  }

  // ----------------------------------------------------- postprocess ---
  {
    using P = DraftModelPostprocessParams;
    py::class_<P> c(m, "DraftModelPostprocessParams");
    c.def(py::init([]() { return P{}; }));
    pointer_field(c, "base_model_draft_tokens", &P::base_model_draft_tokens);
    pointer_field(c, "base_model_seq_lens_this_time", &P::base_model_seq_lens_this_time);
    pointer_field(c, "base_model_seq_lens_encoder", &P::base_model_seq_lens_encoder);
    pointer_field(c, "base_model_stop_flags", &P::base_model_stop_flags);
    c.def_readwrite("draft_cols", &P::draft_cols);
    c.def_readwrite("bsz", &P::bsz);
    m.def("draft_model_postprocess", [](const P& p, uintptr_t stream) {
      throw_if(draft_model_postprocess_cuda(p, as_stream(stream)), "draft_model_postprocess");
      sync(stream, "draft_model_postprocess");
    }, py::arg("params"), py::arg("stream") = 0);
  }

  // ----------------------------------------------------------- eagle ---
  {
    using P = EagleHiddenStatesParams;
    py::class_<P> c(m, "EagleHiddenStatesParams");
    c.def(py::init([]() { return P{}; }));
    pointer_field(c, "seq_lens_this_time", &P::seq_lens_this_time);
    pointer_field(c, "seq_lens_encoder", &P::seq_lens_encoder);
    pointer_field(c, "accept_nums", &P::accept_nums);
    pointer_field(c, "base_model_seq_lens_this_time", &P::base_model_seq_lens_this_time);
    c.def_readwrite("bsz", &P::bsz);
    m.def("eagle_get_hidden_states_plan", [](const P& p, int64_t input_rows, uintptr_t src_rows,
                                             uintptr_t status, uintptr_t out_rows,
                                             uintptr_t stream) {
      constexpr const char* op = "eagle_get_hidden_states_plan";
      require(src_rows, op, "src_rows");
      require(status, op, "status");
      require(out_rows, op, "out_rows");
      throw_if(eagle_get_hidden_states_plan_cuda(p, input_rows, as_ptr<int64_t>(src_rows),
                                                 as_ptr<KernelStatus>(status),
                                                 as_ptr<int64_t>(out_rows), as_stream(stream)),
               op);
      const KernelStatus st = fetch_status(status, stream, op);
      return py::make_tuple(status_tuple(st), fetch_int64(out_rows, stream, op));
    }, py::arg("params"), py::arg("input_rows"), py::arg("src_rows"), py::arg("status"),
       py::arg("out_rows"), py::arg("stream") = 0,
       "Plans the gather into src_rows ([max(input_rows, 1)] int64). "
       "Returns ((code, request, value, limit), out_rows).");
  }
  {
    using P = EagleSelfHiddenStatesParams;
    py::class_<P> c(m, "EagleSelfHiddenStatesParams");
    c.def(py::init([]() { return P{}; }));
    pointer_field(c, "last_seq_lens_this_time", &P::last_seq_lens_this_time);
    pointer_field(c, "seq_lens_this_time", &P::seq_lens_this_time);
    pointer_field(c, "step_idx", &P::step_idx);
    c.def_readwrite("bsz", &P::bsz);
    m.def("eagle_get_self_hidden_states_plan", [](const P& p, int64_t input_rows,
                                                  uintptr_t src_rows, uintptr_t status,
                                                  uintptr_t out_rows, uintptr_t stream) {
      constexpr const char* op = "eagle_get_self_hidden_states_plan";
      require(src_rows, op, "src_rows");
      require(status, op, "status");
      require(out_rows, op, "out_rows");
      throw_if(eagle_get_self_hidden_states_plan_cuda(
                   p, input_rows, as_ptr<int64_t>(src_rows), as_ptr<KernelStatus>(status),
                   as_ptr<int64_t>(out_rows), as_stream(stream)),
               op);
      const KernelStatus st = fetch_status(status, stream, op);
      return py::make_tuple(status_tuple(st), fetch_int64(out_rows, stream, op));
    }, py::arg("params"), py::arg("input_rows"), py::arg("src_rows"), py::arg("status"),
       py::arg("out_rows"), py::arg("stream") = 0,
       "Plans the gather into src_rows ([max(input_rows, 1)] int64). "
       "Returns ((code, request, value, limit), out_rows).");
  }
  m.def("row_gather_copy", [](uintptr_t input, uintptr_t output, uintptr_t src_rows,
                              int64_t out_rows, int64_t row_bytes, uintptr_t stream) {
    constexpr const char* op = "row_gather_copy";
    if (out_rows < 0 || row_bytes < 0)
      throw std::invalid_argument("row_gather_copy: out_rows and row_bytes must be >= 0");
    if (out_rows > 0 && row_bytes > 0) {
      require(input, op, "input");
      require(output, op, "output");
      require(src_rows, op, "src_rows");
    }
    throw_if(row_gather_copy_cuda(as_ptr<const void>(input), as_ptr<void>(output),
                                  as_ptr<const int64_t>(src_rows), out_rows, row_bytes,
                                  as_stream(stream)),
             op);
    sync(stream, op);
  }, py::arg("input"), py::arg("output"), py::arg("src_rows"), py::arg("out_rows"),
     py::arg("row_bytes"), py::arg("stream") = 0,
     "output[k] = input[src_rows[k]] for k < out_rows, rows of row_bytes bytes.");

  // -------------------------------------------------------- mtp_step ---
  {
    using P = MtpStepParams;
    py::class_<P> c(m, "MtpStepParams");
    c.def(py::init([]() { return P{}; }));
    pointer_field(c, "base_model_stop_flags", &P::base_model_stop_flags);
    pointer_field(c, "stop_flags", &P::stop_flags);
    pointer_field(c, "batch_drop", &P::batch_drop);
    pointer_field(c, "seq_lens_this_time", &P::seq_lens_this_time);
    pointer_field(c, "seq_lens_decoder", &P::seq_lens_decoder);
    pointer_field(c, "block_tables", &P::block_tables);
    c.def_readwrite("num_blocks_per_seq", &P::num_blocks_per_seq);
    pointer_field(c, "encoder_block_lens", &P::encoder_block_lens);
    pointer_field(c, "used_list_len", &P::used_list_len);
    pointer_field(c, "free_list", &P::free_list);
    c.def_readwrite("free_list_capacity", &P::free_list_capacity);
    pointer_field(c, "free_list_len", &P::free_list_len);
    pointer_field(c, "need_list", &P::need_list);
    c.def_readwrite("bsz", &P::bsz);
    c.def_readwrite("block_size", &P::block_size);
    c.def_readwrite("max_draft_tokens", &P::max_draft_tokens);
    m.def("mtp_step", [](const P& p, uintptr_t status, uintptr_t stream) {
      constexpr const char* op = "mtp_step";
      require(status, op, "status");
      if (p.need_list == nullptr) throw std::invalid_argument("mtp_step: params.need_list is null");
      throw_if(mtp_step_cuda(p, as_ptr<KernelStatus>(status), as_stream(stream)), op);
      return status_tuple(fetch_status(status, stream, op));
    }, py::arg("params"), py::arg("status"), py::arg("stream") = 0,
       "params.need_list: [max(bsz, 1)] int32 workspace. Returns (code, request, value, limit).");
  }
}

}  // namespace pybind
}  // namespace fd_mtp
