// speculate_clear_accept_nums (spec §5.16): accept_num[b] = 0 for every request
// whose seq_lens_decoder is 0 (an empty or just-reset slot).
#pragma once

#include <cstdint>

#include "common.h"

namespace fd_mtp {

struct ClearAcceptNumsParams {
  int32_t* accept_num;              // written
  const int32_t* seq_lens_decoder;  // [bsz]
  int64_t bsz;
};

FD_HOST_DEVICE inline void clear_accept_nums_request(const ClearAcceptNumsParams& p, int64_t b) {
  if (p.seq_lens_decoder[b] == 0) p.accept_num[b] = 0;
}

inline void clear_accept_nums_cpu(const ClearAcceptNumsParams& p) {
  for (int64_t b = 0; b < p.bsz; ++b) clear_accept_nums_request(p, b);
}

}  // namespace fd_mtp
