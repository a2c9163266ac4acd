// The packed ("padding removed") token layout of a speculative step
// (spec §1.3, §5.1-§5.3):
//   speculate_get_padding_offset        -> packed token ids and their offsets,
//   speculate_get_seq_lens_output       -> logits rows per request,
//   speculate_get_output_padding_offset -> offsets of the packed logits rows.
//
// Both offset ops take an inclusive prefix sum `cum` of (width - len[b]) and
// place request b's items at packed indices [b*width - cum[b-1], ... + len[b]).
// Upstream trusts `cum`; here a check pass verifies, before anything is
// written, that the requests' ranges neither overlap nor leave [0, total):
// request b's slot [start(b), start(b + 1)) must hold its len[b] items
// (cum[b] - cum[b-1] <= width - len[b]) and the end of the last slot,
// start(bsz) = bsz*width - cum[bsz-1], may not pass the host-read total.
// FastDeploy's own tests pass offsets with gaps between requests (slots
// wider than the requests); gap entries of the outputs stay zero, as
// upstream's zero-initialised outputs. The exact prefix sum (no gaps) is the
// common case.
#pragma once

#include "common.h"

namespace fd_mtp {

// Shared by both offset ops: 0 <= len[b], and request b's slot holds len[b]
// items: cum[b] <= cum[b-1] + width - len[b] (equality: no gap after it).
// `code_len` / `code_cum` are the op's status codes.
FD_HOST_DEVICE inline bool packed_layout_check(const int32_t* cum, const int32_t* len,
                                               int64_t width, int64_t b, int32_t code_len,
                                               int32_t code_cum, KernelStatus* st) {
  const int64_t n = len[b];
  if (n < 0) {
    report(st, code_len, static_cast<int32_t>(b), n, 0);
    return false;
  }
  const int64_t before = b == 0 ? 0 : cum[b - 1];
  const int64_t most = before + width - n;
  if (cum[b] > most) {
    report(st, code_cum, static_cast<int32_t>(b), cum[b], most);
    return false;
  }
  return true;
}

// First packed index of request b: b*width - cum[b-1] (= sum of len[j<b]
// once the layout is checked).
FD_HOST_DEVICE inline int64_t packed_start(const int32_t* cum, int64_t width, int64_t b) {
  return b * width - (b == 0 ? 0 : static_cast<int64_t>(cum[b - 1]));
}

// One past the last packed index the layout reserves: start(bsz) (0 for an
// empty batch). It must not exceed the host-read total.
FD_HOST_DEVICE inline int64_t packed_end(const int32_t* cum, int64_t width, int64_t bsz) {
  return bsz == 0 ? 0 : packed_start(cum, width, bsz);
}

// ------------------------------------------- speculate_get_padding_offset ---
enum PaddingOffsetStatus : int32_t {
  kPadNegativeSeqLen = 1,
  kPadInputIdsRow = 2,
  kPadDraftTokensRow = 3,
  kPadCumOffsets = 4,
  kPadTokenNum = 5,
};

struct PaddingOffsetParams {
  const int64_t* input_ids;     // [>= bsz, input_ids_cols]: prefill tokens
  int64_t input_ids_cols;       // L_in, the width of cum_offsets
  const int64_t* draft_tokens;  // [>= bsz, draft_tokens_cols]: decode tokens
  int64_t draft_tokens_cols;
  const int32_t* cum_offsets;  // [bsz] inclusive prefix sum of L_in - seq_len
  const int32_t* seq_len;      // [bsz]
  const int32_t* seq_lens_encoder;
  int64_t bsz;
  int64_t token_num;            // T, read on the host
  int64_t* x_remove_padding;    // [T], written
  int32_t* batch_id_per_token;  // [T], written
  int32_t* cu_seqlens_q;        // [bsz + 1], written
  int32_t* cu_seqlens_k;        // [bsz + 1], written
};

// Request b reads its tokens from a row that must hold them all, and its
// packed range must follow from cum_offsets.
FD_HOST_DEVICE inline void padding_offset_check(const PaddingOffsetParams& p, int64_t b,
                                                KernelStatus* st) {
  if (!packed_layout_check(p.cum_offsets, p.seq_len, p.input_ids_cols, b, kPadNegativeSeqLen,
                           kPadCumOffsets, st))
    return;
  const int64_t n = p.seq_len[b];
  if (p.seq_lens_encoder[b] > 0) {
    if (n > p.input_ids_cols)
      report(st, kPadInputIdsRow, static_cast<int32_t>(b), n, p.input_ids_cols);
  } else if (n > p.draft_tokens_cols) {
    report(st, kPadDraftTokensRow, static_cast<int32_t>(b), n, p.draft_tokens_cols);
  }
}

// Token i of request b: a prefilling request (seq_lens_encoder > 0) takes
// input_ids[b, i], a decoding one draft_tokens[b, i].
FD_HOST_DEVICE inline void padding_offset_token(const PaddingOffsetParams& p, int64_t b,
                                                int64_t i) {
  const int64_t t = packed_start(p.cum_offsets, p.input_ids_cols, b) + i;
  p.batch_id_per_token[t] = static_cast<int32_t>(b);
  p.x_remove_padding[t] = p.seq_lens_encoder[b] > 0 ? p.input_ids[b * p.input_ids_cols + i]
                                                    : p.draft_tokens[b * p.draft_tokens_cols + i];
}

// cu_seqlens_q/k[b + 1] = (b + 1) * L_in - cum_offsets[b]; index 0 is 0.
FD_HOST_DEVICE inline void padding_offset_cu_seqlens(const PaddingOffsetParams& p, int64_t b) {
  const int32_t v = static_cast<int32_t>((b + 1) * p.input_ids_cols - p.cum_offsets[b]);
  p.cu_seqlens_q[b + 1] = v;
  p.cu_seqlens_k[b + 1] = v;
}

inline KernelStatus speculate_get_padding_offset_cpu(const PaddingOffsetParams& p) {
  KernelStatus st{};
  for (int64_t b = 0; b < p.bsz && st.code == 0; ++b) padding_offset_check(p, b, &st);
  const int64_t end = st.code == 0 ? packed_end(p.cum_offsets, p.input_ids_cols, p.bsz) : 0;
  if (st.code == 0 && end > p.token_num) report(&st, kPadTokenNum, -1, p.token_num, end);
  if (st.code != 0) return st;
  p.cu_seqlens_q[0] = 0;
  p.cu_seqlens_k[0] = 0;
  for (int64_t b = 0; b < p.bsz; ++b) {
    for (int64_t i = 0; i < p.seq_len[b]; ++i) padding_offset_token(p, b, i);
    padding_offset_cu_seqlens(p, b);
  }
  return st;
}

// ------------------------------------------ speculate_get_seq_lens_output ---
// Logits rows of request b: none for an empty slot, one for a prefill chunk
// (its last token) or a single-token step, every token of a speculative
// decode. (seq_lens_decoder is not used.)
FD_HOST_DEVICE inline int32_t seq_lens_output_of(int32_t this_time, int32_t encoder) {
  if (this_time == 0) return 0;
  if (this_time == 1) return 1;
  if (encoder != 0) return 1;
  return this_time;
}

struct SeqLensOutputParams {
  const int32_t* seq_lens_this_time;  // [bsz]
  const int32_t* seq_lens_encoder;    // [>= bsz]
  int32_t* seq_lens_output;           // [bsz], written
  int64_t bsz;
};

inline void speculate_get_seq_lens_output_cpu(const SeqLensOutputParams& p) {
  for (int64_t b = 0; b < p.bsz; ++b)
    p.seq_lens_output[b] = seq_lens_output_of(p.seq_lens_this_time[b], p.seq_lens_encoder[b]);
}

// ------------------------------------ speculate_get_output_padding_offset ---
enum OutputPaddingOffsetStatus : int32_t {
  kOutNegativeSeqLens = 1,
  kOutSeqLensTooLong = 2,
  kOutCumOffsets = 3,
  kOutTokenNum = 4,
};

struct OutputPaddingOffsetParams {
  const int32_t* output_cum_offsets_tmp;  // [bsz] inclusive prefix sum of max_seq_len - o
  const int32_t* seq_lens_output;         // [>= bsz]
  int64_t bsz;
  int64_t max_seq_len;
  int64_t out_token_num;           // To, read on the host
  int32_t* output_padding_offset;  // [To], written
  int32_t* output_cum_offsets;     // [bsz], written
};

// Besides the layout, a request may not have more than max_seq_len rows:
// consumers recover b as (r + output_padding_offset[r]) div max_seq_len.
FD_HOST_DEVICE inline void output_padding_offset_check(const OutputPaddingOffsetParams& p,
                                                       int64_t b, KernelStatus* st) {
  if (!packed_layout_check(p.output_cum_offsets_tmp, p.seq_lens_output, p.max_seq_len, b,
                           kOutNegativeSeqLens, kOutCumOffsets, st))
    return;
  if (p.seq_lens_output[b] > p.max_seq_len)
    report(st, kOutSeqLensTooLong, static_cast<int32_t>(b), p.seq_lens_output[b], p.max_seq_len);
}

// Row i of request b: output_padding_offset[b*max_seq_len - ce + i] = ce,
// with ce = output_cum_offsets_tmp[b - 1] (0 for b = 0).
FD_HOST_DEVICE inline void output_padding_offset_row(const OutputPaddingOffsetParams& p, int64_t b,
                                                     int64_t i) {
  const int64_t start = packed_start(p.output_cum_offsets_tmp, p.max_seq_len, b);
  p.output_padding_offset[start + i] = b == 0 ? 0 : p.output_cum_offsets_tmp[b - 1];
}

FD_HOST_DEVICE inline void output_cum_offsets_of(const OutputPaddingOffsetParams& p, int64_t b) {
  p.output_cum_offsets[b] = b == 0 ? 0 : p.output_cum_offsets_tmp[b - 1];
}

inline KernelStatus speculate_get_output_padding_offset_cpu(const OutputPaddingOffsetParams& p) {
  KernelStatus st{};
  for (int64_t b = 0; b < p.bsz && st.code == 0; ++b) output_padding_offset_check(p, b, &st);
  const int64_t end = st.code == 0 ? packed_end(p.output_cum_offsets_tmp, p.max_seq_len, p.bsz) : 0;
  if (st.code == 0 && end > p.out_token_num) report(&st, kOutTokenNum, -1, p.out_token_num, end);
  if (st.code != 0) return st;
  for (int64_t b = 0; b < p.bsz; ++b) {
    for (int64_t i = 0; i < p.seq_lens_output[b]; ++i) output_padding_offset_row(p, b, i);
    output_cum_offsets_of(p, b);
  }
  return st;
}

}  // namespace fd_mtp
