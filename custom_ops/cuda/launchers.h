// Declarations of the CUDA launchers. Framework-free: raw pointers, sizes and
// a cudaStream_t. A launcher never allocates and never synchronises; it
// returns the launch's cudaError_t. Ops that validate input write a
// KernelStatus to device memory (`status`); when its code is not 0 the
// launch wrote nothing else.
#pragma once

#include <cuda_runtime_api.h>

#include "../kernels/draft_model_postprocess.h"
#include "../kernels/draft_model_preprocess.h"
#include "../kernels/draft_model_update.h"
#include "../kernels/eagle_hidden_states.h"
#include "../kernels/mtp_step.h"
#include "../kernels/ngram.h"

namespace fd_mtp {

// *running = number of requests that draft this step.
cudaError_t draft_model_preprocess_cuda(const DraftModelPreprocessParams& p,
                                        KernelStatus* status, int64_t* running,
                                        cudaStream_t stream);

// *stopped = number of requests stopped after the update.
cudaError_t draft_model_update_cuda(const DraftModelUpdateParams& p, KernelStatus* status,
                                    int64_t* stopped, cudaStream_t stream);

cudaError_t draft_model_postprocess_cuda(const DraftModelPostprocessParams& p,
                                         cudaStream_t stream);

// Row gathers of the eagle ops, in two launches around a host read of
// *out_rows (the output's row count): a plan writing the source row of each
// output row into src_rows ([input_rows] int64 workspace), then the copy.
cudaError_t eagle_get_hidden_states_plan_cuda(const EagleHiddenStatesParams& p,
                                              int64_t input_rows, int64_t* src_rows,
                                              KernelStatus* status, int64_t* out_rows,
                                              cudaStream_t stream);
cudaError_t eagle_get_self_hidden_states_plan_cuda(const EagleSelfHiddenStatesParams& p,
                                                   int64_t input_rows, int64_t* src_rows,
                                                   KernelStatus* status, int64_t* out_rows,
                                                   cudaStream_t stream);
cudaError_t row_gather_copy_cuda(const void* input, void* output, const int64_t* src_rows,
                                 int64_t out_rows, int64_t row_bytes, cudaStream_t stream);

// p.need_list: [bsz] int32 workspace.
cudaError_t mtp_step_cuda(const MtpStepParams& p, KernelStatus* status, cudaStream_t stream);

// ngram_match / hybrid_mtp_ngram (p.hybrid). hits: [max(bsz, 1)] int64
// workspace (the winning search position of each request, or -1).
cudaError_t ngram_cuda(const NgramParams& p, int64_t* hits, KernelStatus* status,
                       cudaStream_t stream);

}  // namespace fd_mtp
