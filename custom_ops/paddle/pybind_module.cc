// fd_mtp_ops_pybind: the ops' Paddle entry points (ops.h) bound with pybind11,
// for dynamic mode. This is FastDeploy's own arrangement (its ops are called
// through a pybind module in dynamic mode, spec §1.1) and it matters: paddle
// 3.3's generic custom-op runner (_C_ops._run_custom_op) copies the registry of
// every loaded custom op on each call, which costs tens of microseconds once a
// library registers a few dozen ops; a direct pybind call costs about 2 us.
//
// Tensors convert through paddle's own caster (paddle/utils/pybind.h), which
// shares the Python tensor's storage, so in-place writes land in the caller's
// tensors. An exception from an argument check (PD_THROW) becomes ValueError.
#include <exception>
#include <string>

#include "paddle/utils/pybind.h"
#include "ops.h"
#include "ops_gen.h"

namespace py = pybind11;

PYBIND11_MODULE(fd_mtp_ops_pybind, m) {
  m.doc() = "fd_mtp ops for dynamic mode (see fd_mtp.ops; call those wrappers, not these)";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const py::error_already_set&) {
      throw;
    } catch (const py::builtin_exception&) {
      throw;
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  m.def("draft_model_postprocess", &DraftModelPostprocess);
  m.def("draft_model_preprocess", &DraftModelPreprocess);
  m.def("draft_model_update", &DraftModelUpdate);
  m.def("eagle_get_hidden_states", &EagleGetHiddenStates);
  m.def("eagle_get_self_hidden_states", &EagleGetSelfHiddenStates);
  m.def("shared_empty", &SharedEmpty);
  m.def("set_data_ipc", &SetDataIpc);
  m.def("share_external_data", &ShareExternalData);
  m.def("unset_data_ipc", &UnsetDataIpc);
  m.def("speculate_save_output", &SpeculateSaveOutput);
  m.def("speculate_get_output", &SpeculateGetOutput);
  m.def("mtp_save_first_token", &MtpSaveFirstToken);
  m.def("mtp_step_paddle", &MtpStepPaddle);
  m.def("ngram_match", &NgramMatch);
  m.def("hybrid_mtp_ngram", &HybridMtpNgram);
  m.def("paged_attention", &PagedAttention);
  m.def("rebuild_padding", &RebuildPadding);
  m.def("recover_decode_task", &RecoverDecodeTask);
  m.def("speculate_clear_accept_nums", &SpeculateClearAcceptNums);
  m.def("speculate_get_token_penalty_multi_scores", &SpeculateGetTokenPenaltyMultiScores);
  m.def("speculate_get_padding_offset", &SpeculateGetPaddingOffset);
  m.def("speculate_get_seq_lens_output", &SpeculateGetSeqLensOutput);
  m.def("speculate_get_output_padding_offset", &SpeculateGetOutputPaddingOffset);
  m.def("speculate_schedule_cache", &SpeculateScheduleCache);
  m.def("speculate_set_stop_value_multi_seqs", &SpeculateSetStopValueMultiSeqs);
  m.def("speculate_set_value_by_flags_and_idx", &SpeculateSetValueByFlagsAndIdx);
  m.def("speculate_step_paddle", &SpeculateStepPaddle);
  m.def("speculate_update", &SpeculateUpdate);
  m.def("speculate_verify", &SpeculateVerify);
  m.def("top_p_candidates", &TopPCandidates);
}
