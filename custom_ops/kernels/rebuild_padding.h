// rebuild_padding (spec §5.4): pick the hidden-state rows that get logits out
// of the packed model output tmp_out [T, H].
//
// Speculative branch (output_padding_offset given): output row r belongs to
// request b = (r + output_padding_offset[r]) div max_input_length, local row
// (r + output_padding_offset[r]) - b * max_input_length; it copies tmp_out row
// cu_seqlens_q[b] + local + (enc[b] - 1 if enc[b] > 0 else 0): the last token
// of a prefill chunk, every token of a decode. Plain branch (no offsets): one
// row per request, local = 0. Rows of empty requests (this_time == 0, or
// dec == enc == 0) stay zero.
//
// The row count R of the speculative branch is upstream's, R = T - sum over
// enc[b] > 0 of (enc[b] - 1) (upstream computes it on the host; here the rows
// pass counts it and checks every row, on the CPU or the device, and the
// binding reads it back: fd_mtp/schema Rows); the plain branch has bsz rows.
// The copy is a byte copy, so the kernels are dtype-agnostic (row_bytes = H *
// itemsize).
//
// Padded variant (fd_mtp.cuda, issue 20: no host read): out_rows is a fixed
// capacity (T) and `live_rows` points at R computed on the device from
// cu_seqlens_q[bsz] (the packed token count) instead of T; rows r >= R are
// zero rows, neither checked nor copied.
#pragma once

#include <cstring>

#include "common.h"

namespace fd_mtp {

enum RebuildPaddingStatus : int32_t {
  kRebuildRequest = 1,        // a row maps to a request outside [0, bsz)
  kRebuildSourceRow = 2,      // a row would copy from outside tmp_out
  kRebuildRows = 3,           // padded: R outside [0, out_rows]
  kRebuildNegativeRows = 4,   // R < 0: more prefill tokens than tmp_out has rows
  kRebuildOffsets = 5,        // output_padding_offset has fewer than R entries
  kRebuildPaddedOffsets = 6,  // padded: output_padding_offset has fewer than T entries
};

struct RebuildPaddingParams {
  const void* tmp_out;                   // [tmp_rows, row_bytes]
  int64_t tmp_rows;                      // T
  int64_t row_bytes;                     // H * itemsize
  const int32_t* cu_seqlens_q;           // [bsz + 1]
  const int32_t* seq_len_this_time;      // [>= bsz]
  const int32_t* seq_lens_decoder;       // [>= bsz]
  const int32_t* seq_lens_encoder;       // [>= bsz]
  const int32_t* output_padding_offset;  // [offset_entries >= out_rows], or null
  int64_t offset_entries;
  bool use_output_padding_offset;  // the speculative branch
  int64_t bsz;
  int64_t max_input_length;
  int64_t out_rows;  // R (speculative) or bsz (plain); the capacity when padded
  void* out;         // [out_rows, row_bytes], written
  // Padded variant only (else null): R on the device; rows >= *live_rows are zero.
  const int64_t* live_rows;
};

// Where output row r comes from: `row` = source row of tmp_out, or -1 for a
// zero row; `code` != 0 when the input is invalid (then request/value/limit
// describe it as for KernelStatus).
struct RebuildSource {
  int64_t row;
  int32_t code;
  int32_t request;
  int64_t value;
  int64_t limit;
};

FD_HOST_DEVICE inline RebuildSource rebuild_padding_source(const RebuildPaddingParams& p,
                                                           int64_t r) {
  if (p.live_rows != nullptr && r >= *p.live_rows) return RebuildSource{-1, 0, 0, 0, 0};
  int64_t b = r, local = 0;
  if (p.use_output_padding_offset) {
    const int64_t pos = r + p.output_padding_offset[r];
    b = pos >= 0 ? pos / p.max_input_length : -1;
    if (b < 0 || b >= p.bsz) return RebuildSource{-1, kRebuildRequest, -1, b, p.bsz};
    local = pos - b * p.max_input_length;
  }
  const int32_t enc = p.seq_lens_encoder[b];
  if (p.seq_len_this_time[b] == 0 || (p.seq_lens_decoder[b] == 0 && enc == 0))
    return RebuildSource{-1, 0, 0, 0, 0};
  const int64_t src = static_cast<int64_t>(p.cu_seqlens_q[b]) + local + (enc > 0 ? enc - 1 : 0);
  if (!in_range(src, p.tmp_rows))
    return RebuildSource{-1, kRebuildSourceRow, static_cast<int32_t>(b), src, p.tmp_rows};
  return RebuildSource{src, 0, 0, 0, 0};
}

FD_HOST_DEVICE inline void rebuild_padding_check(const RebuildPaddingParams& p, int64_t r,
                                                 KernelStatus* st) {
  const RebuildSource s = rebuild_padding_source(p, r);
  if (s.code != 0) report(st, s.code, s.request, s.value, s.limit);
}

// The speculative branch's R from `prefill`, the sum over prefilling requests
// of (enc - 1): T - prefill, or, padded (T is the capacity), the packed token
// count cu_seqlens_q[bsz] - prefill; checked against T and the offsets.
// Reports the first problem (returns 0 then).
FD_HOST_DEVICE inline int64_t rebuild_padding_count(const RebuildPaddingParams& p, int64_t prefill,
                                                    bool padded, KernelStatus* st) {
  const int64_t rows =
      (padded ? static_cast<int64_t>(p.cu_seqlens_q[p.bsz]) : p.tmp_rows) - prefill;
  const int64_t need = padded ? p.tmp_rows : rows;  // the offsets' entries read
  if (padded && (rows < 0 || rows > p.tmp_rows)) {
    report(st, kRebuildRows, -1, rows, p.tmp_rows);
  } else if (rows < 0) {
    report(st, kRebuildNegativeRows, -1, rows, p.tmp_rows);
  } else if (p.offset_entries < need) {
    report(st, padded ? kRebuildPaddedOffsets : kRebuildOffsets, -1, need, p.offset_entries);
  } else {
    return rows;
  }
  return 0;
}

// The rows pass on the CPU: R (bsz in the plain branch), then every row checked.
inline KernelStatus rebuild_padding_rows_cpu(const RebuildPaddingParams& p, int64_t* rows) {
  KernelStatus st{};
  *rows = p.bsz;
  if (p.use_output_padding_offset) {
    int64_t prefill = 0;
    for (int64_t b = 0; b < p.bsz; ++b)
      if (p.seq_lens_encoder[b] > 0) prefill += p.seq_lens_encoder[b] - 1;
    *rows = rebuild_padding_count(p, prefill, false, &st);
  }
  for (int64_t r = 0; r < *rows && st.code == 0; ++r) rebuild_padding_check(p, r, &st);
  return st;
}

// The copy of the p.out_rows rows (after the rows pass).
inline void rebuild_padding_cpu(const RebuildPaddingParams& p) {
  const char* in = static_cast<const char*>(p.tmp_out);
  char* out = static_cast<char*>(p.out);
  const size_t n = static_cast<size_t>(p.row_bytes);
  for (int64_t r = 0; r < p.out_rows && n > 0; ++r) {
    const int64_t src = rebuild_padding_source(p, r).row;
    if (src >= 0)
      std::memcpy(out + r * p.row_bytes, in + src * p.row_bytes, n);
    else
      std::memset(out + r * p.row_bytes, 0, n);
  }
}

}  // namespace fd_mtp
