// fd_mtp_cuda bindings of the block managers (spec §5.13-§5.15).
#include "common.h"

namespace fd_mtp {
namespace pybind {

void bind_blocks(py::module_& m) {
  // ------------------------------------------- speculate_schedule_cache ---
  {
    using P = ScheduleCacheParams;
    py::class_<P> c(m, "ScheduleCacheParams");
    c.def(py::init([]() { return P{}; }));
    pointer_field(c, "draft_tokens", &P::draft_tokens);
    c.def_readwrite("draft_cols", &P::draft_cols);
    pointer_field(c, "block_tables", &P::block_tables);
    c.def_readwrite("num_blocks_per_seq", &P::num_blocks_per_seq);
    pointer_field(c, "stop_flags", &P::stop_flags);
    pointer_field(c, "prompt_lens", &P::prompt_lens);
    pointer_field(c, "seq_lens_this_time", &P::seq_lens_this_time);
    pointer_field(c, "seq_lens_encoder", &P::seq_lens_encoder);
    pointer_field(c, "seq_lens_decoder", &P::seq_lens_decoder);
    pointer_field(c, "step_seq_lens_decoder", &P::step_seq_lens_decoder);
    pointer_field(c, "step_draft_tokens", &P::step_draft_tokens);
    c.def_readwrite("step_draft_cols", &P::step_draft_cols);
    pointer_field(c, "step_seq_lens_this_time", &P::step_seq_lens_this_time);
    pointer_field(c, "accept_num", &P::accept_num);
    pointer_field(c, "accept_tokens", &P::accept_tokens);
    c.def_readwrite("accept_cols", &P::accept_cols);
    pointer_field(c, "is_block_step", &P::is_block_step);
    c.def_readwrite("bsz", &P::bsz);
    c.def_readwrite("max_bsz", &P::max_bsz);
    c.def_readwrite("block_size", &P::block_size);
    c.def_readwrite("max_draft_tokens", &P::max_draft_tokens);
    c.def_readwrite("prefill_one_step_stop", &P::prefill_one_step_stop);
    m.def("speculate_schedule_cache", [](const P& p, uintptr_t status, uintptr_t stopped,
                                         uintptr_t stream) {
      constexpr const char* op = "speculate_schedule_cache";
      require(status, op, "status");
      require(stopped, op, "stopped");
      throw_if(speculate_schedule_cache_cuda(p, as_ptr<KernelStatus>(status),
                                             as_ptr<int64_t>(stopped), as_stream(stream)),
               op);
      const KernelStatus st = fetch_status(status, stream, op);
      return py::make_tuple(status_tuple(st), fetch_int64(stopped, stream, op));
    }, py::arg("params"), py::arg("status"), py::arg("stopped"), py::arg("stream") = 0,
       "Returns ((code, request, value, limit), stopped): stopped = requests b < bsz stopped "
       "after the call.");
  }

  // ------------------------------------------------ recover_decode_task ---
  {
    using P = RecoverDecodeParams;
    py::class_<P> c(m, "RecoverDecodeParams");
    c.def(py::init([]() { return P{}; }));
    pointer_field(c, "stop_flags", &P::stop_flags);
    pointer_field(c, "seq_lens_this_time", &P::seq_lens_this_time);
    pointer_field(c, "seq_lens_encoder", &P::seq_lens_encoder);
    pointer_field(c, "seq_lens_decoder", &P::seq_lens_decoder);
    pointer_field(c, "step_seq_lens_decoder", &P::step_seq_lens_decoder);
    pointer_field(c, "block_tables", &P::block_tables);
    c.def_readwrite("num_blocks_per_seq", &P::num_blocks_per_seq);
    pointer_field(c, "is_block_step", &P::is_block_step);
    pointer_field(c, "draft_tokens", &P::draft_tokens);
    pointer_field(c, "step_draft_tokens", &P::step_draft_tokens);
    pointer_field(c, "step_seq_lens_this_time", &P::step_seq_lens_this_time);
    c.def_readwrite("draft_cols", &P::draft_cols);
    c.def_readwrite("step_draft_cols", &P::step_draft_cols);
    c.def_readwrite("bsz", &P::bsz);
    c.def_readwrite("block_size", &P::block_size);
    c.def_readwrite("max_draft_tokens", &P::max_draft_tokens);
    m.def("recover_decode_task", [](const P& p, uintptr_t status, uintptr_t stream) {
      constexpr const char* op = "recover_decode_task";
      require(status, op, "status");
      throw_if(recover_decode_task_cuda(p, as_ptr<KernelStatus>(status), as_stream(stream)), op);
      return status_tuple(fetch_status(status, stream, op));
    }, py::arg("params"), py::arg("status"), py::arg("stream") = 0,
       "draft_tokens/step_draft_tokens/step_seq_lens_this_time all 0 = non-speculative "
       "variant. Returns (code, request, value, limit).");
  }

  // ---------------------------------------------- speculate_step_paddle ---
  {
    using P = SpeculateStepParams;
    py::class_<P> c(m, "SpeculateStepParams");
    c.def(py::init([]() { return P{}; }));
    pointer_field(c, "stop_flags", &P::stop_flags);
    pointer_field(c, "seq_lens_this_time", &P::seq_lens_this_time);
    pointer_field(c, "ori_seq_lens_encoder", &P::ori_seq_lens_encoder);
    pointer_field(c, "seq_lens_encoder", &P::seq_lens_encoder);
    pointer_field(c, "seq_lens_decoder", &P::seq_lens_decoder);
    pointer_field(c, "block_tables", &P::block_tables);
    c.def_readwrite("num_blocks_per_seq", &P::num_blocks_per_seq);
    pointer_field(c, "encoder_block_lens", &P::encoder_block_lens);
    pointer_field(c, "is_block_step", &P::is_block_step);
    pointer_field(c, "step_block_list", &P::step_block_list);
    c.def_readwrite("step_list_capacity", &P::step_list_capacity);
    pointer_field(c, "step_lens", &P::step_lens);
    pointer_field(c, "recover_block_list", &P::recover_block_list);
    c.def_readwrite("recover_list_capacity", &P::recover_list_capacity);
    pointer_field(c, "recover_lens", &P::recover_lens);
    pointer_field(c, "need_block_list", &P::need_block_list);
    c.def_readwrite("need_list_capacity", &P::need_list_capacity);
    pointer_field(c, "need_block_len", &P::need_block_len);
    pointer_field(c, "used_list_len", &P::used_list_len);
    pointer_field(c, "free_list", &P::free_list);
    c.def_readwrite("free_list_capacity", &P::free_list_capacity);
    pointer_field(c, "free_list_len", &P::free_list_len);
    pointer_field(c, "input_ids", &P::input_ids);
    c.def_readwrite("input_ids_cols", &P::input_ids_cols);
    pointer_field(c, "pre_ids", &P::pre_ids);
    c.def_readwrite("pre_ids_cols", &P::pre_ids_cols);
    pointer_field(c, "step_idx", &P::step_idx);
    pointer_field(c, "first_token_ids", &P::first_token_ids);
    pointer_field(c, "accept_num", &P::accept_num);
    c.def_readwrite("bsz", &P::bsz);
    c.def_readwrite("block_size", &P::block_size);
    c.def_readwrite("max_draft_tokens", &P::max_draft_tokens);
    m.def("speculate_step", [](const P& p, uintptr_t status, uintptr_t stream) {
      constexpr const char* op = "speculate_step";
      require(status, op, "status");
      throw_if(speculate_step_cuda(p, as_ptr<KernelStatus>(status), as_stream(stream)), op);
      return status_tuple(fetch_status(status, stream, op));
    }, py::arg("params"), py::arg("status"), py::arg("stream") = 0,
       "Returns (code, request, value, limit).");
  }
}

}  // namespace pybind
}  // namespace fd_mtp
