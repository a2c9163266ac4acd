// Output messages of the speculative decoder (spec §5.11, §6.8): the int32
// payload FastDeploy sends through a SysV message queue after every step.
//
// This header only builds the payload (pure functions over raw pointers that
// fill an int32 buffer); the SysV calls live in the binding
// (the Paddle binding, msgqueue.cc). The layout is FastDeploy's wire format:
//
//   mtext[0]                          +msg_id if not_need_stop else -msg_id
//   mtext[1]                          bs (number of requests in the batch)
//   mtext[2 + i],          i < 256    count for request i (0 for i >= bs)
//   mtext[258 + 6 i + j],  j < 6      token j of request i (0 for i >= bs)
//
// sent with `long mtype = 1` in front (see Message in the binding).
#pragma once

#include <cstdint>

#include "common.h"

namespace fd_mtp {
namespace msgqueue {

constexpr int64_t kMaxBsz = 256;                // MAX_BSZ: requests per message
constexpr int64_t kMaxDraftTokens = 6;          // MAX_DRAFT_TOKENS: tokens per request
constexpr int64_t kCountsOffset = 2;            // mtext[2 + i]: count of request i
constexpr int64_t kTokensOffset = 2 + kMaxBsz;  // mtext[258 + 6 i + j]
constexpr int64_t kMessageInts = 2 + kMaxBsz + kMaxBsz * kMaxDraftTokens;  // 1794
constexpr int64_t kMessageBytes = kMessageInts * 4;                        // 7176

// Status codes of the checks below (StatusInfo tables in the binding).
enum : int32_t {
  kBatchTooLarge = 1,  // bs > kMaxBsz
  kBadMsgId = 2,       // msg_id == 2 (reserved for "no output") or negative
  kBadAcceptNum = 3,   // a sent count outside [0, min(width, kMaxDraftTokens)]
};

// Header word: the message id, negated when the engine will stop.
inline int32_t header_word(int32_t msg_id, bool not_need_stop) {
  return not_need_stop ? msg_id : -msg_id;
}

// Validates what the payload builders rely on; nothing is built or sent on
// failure. msg_id 2 / -2 mean "no output" to readers, so upstream rejects 2
// and every negative id.
inline void message_check(int64_t bsz, int64_t msg_id, KernelStatus* status) {
  if (bsz > kMaxBsz) report(status, kBatchTooLarge, -1, bsz, kMaxBsz);
  if (msg_id == 2 || msg_id < 0) report(status, kBadMsgId, -1, msg_id, 2);
}

// ------------------------------------------------ speculate_save_output ---

struct SaveOutputParams {
  const int64_t* accept_tokens;     // [bsz, width]
  int64_t width;                    // columns of accept_tokens (any, even < 6)
  const int32_t* accept_num;        // [>= bsz]
  const int32_t* seq_lens_decoder;  // [>= bsz]
  const int64_t* prompt_lens;       // [>= bsz]
  int64_t bsz;                      // <= kMaxBsz (message_check)
  bool not_need_stop;
  bool skip_prefill;
  int32_t msg_id;
};

inline bool save_output_in_prefill(const SaveOutputParams& p, int64_t i) {
  return p.skip_prefill && static_cast<int64_t>(p.seq_lens_decoder[i]) < p.prompt_lens[i];
}

// Every count that is sent must fit its request's slot and row: at most
// min(width, 6) tokens. A larger count would make a reader take tokens from
// the next request's slot (upstream sends it anyway); a negative one is
// meaningless. Counts of skipped prefill requests are sent as 0 and not
// checked. Runs before anything is built or sent.
inline void save_output_check(const SaveOutputParams& p, KernelStatus* status) {
  const int64_t limit = p.width < kMaxDraftTokens ? p.width : kMaxDraftTokens;
  for (int64_t i = 0; i < p.bsz; ++i) {
    if (save_output_in_prefill(p, i)) continue;
    if (p.accept_num[i] < 0 || p.accept_num[i] > limit)
      report(status, kBadAcceptNum, static_cast<int32_t>(i), p.accept_num[i], limit);
  }
}

// Slot i (i < kMaxBsz) of the save_output message: the accepted count (0 for
// empty slots and, with skip_prefill, for requests still in their prompt) and
// the first 6 accepted tokens. A row narrower than 6 columns is padded with 0
// (upstream reads past the row into the next one); tokens are narrowed to
// int32 like upstream's (int) cast.
inline void save_output_slot(const SaveOutputParams& p, int64_t i, int32_t* mtext) {
  int32_t* tokens = mtext + kTokensOffset + i * kMaxDraftTokens;
  if (i >= p.bsz) {
    mtext[kCountsOffset + i] = 0;
    for (int64_t j = 0; j < kMaxDraftTokens; ++j) tokens[j] = 0;
    return;
  }
  mtext[kCountsOffset + i] = save_output_in_prefill(p, i) ? 0 : p.accept_num[i];
  const int64_t* row = p.accept_tokens + i * p.width;
  for (int64_t j = 0; j < kMaxDraftTokens; ++j)
    tokens[j] = j < p.width ? static_cast<int32_t>(row[j]) : 0;
}

// Fills all kMessageInts words of `mtext`.
inline void save_output_message(const SaveOutputParams& p, int32_t* mtext) {
  mtext[0] = header_word(p.msg_id, p.not_need_stop);
  mtext[1] = static_cast<int32_t>(p.bsz);
  for (int64_t i = 0; i < kMaxBsz; ++i) save_output_slot(p, i, mtext);
}

// ------------------------------------------------- mtp_save_first_token ---

struct FirstTokenParams {
  const int64_t* x;  // [bsz, width]: x[i, 0] target's first token, x[i, 1] first draft
  int64_t width;     // >= 2 (checked by the binding)
  const int32_t* seq_lens_decoder;  // [>= bsz]
  const int64_t* prompt_lens;       // [>= bsz]
  const int64_t* step_idx;          // [>= bsz]
  int64_t bsz;                      // <= kMaxBsz (message_check)
  bool not_need_stop;
  bool skip_chunk_prefill;
  int32_t msg_id;
};

// Slot i (i < kMaxBsz) of the first-token message. A request whose step_idx
// is 1 (its first token was just produced) sends count 2 and tokens
// [x[i,0], x[i,1], 0, 0, 0, 0]; every other slot is all zeros. Upstream
// keeps the message in a function static and leaves slots with step_idx >= 2
// (and i >= bs) holding the previous message's values; here they are zero.
inline void first_token_slot(const FirstTokenParams& p, int64_t i, int32_t* mtext) {
  int32_t* tokens = mtext + kTokensOffset + i * kMaxDraftTokens;
  for (int64_t j = 0; j < kMaxDraftTokens; ++j) tokens[j] = 0;
  mtext[kCountsOffset + i] = 0;
  if (i >= p.bsz) return;
  const bool chunk =
      p.skip_chunk_prefill && static_cast<int64_t>(p.seq_lens_decoder[i]) < p.prompt_lens[i];
  if (chunk || p.step_idx[i] != 1) return;
  const int64_t* row = p.x + i * p.width;
  mtext[kCountsOffset + i] = 2;
  tokens[0] = static_cast<int32_t>(row[0]);
  tokens[1] = static_cast<int32_t>(row[1]);
}

// Fills all kMessageInts words of `mtext`.
inline void first_token_message(const FirstTokenParams& p, int32_t* mtext) {
  mtext[0] = header_word(p.msg_id, p.not_need_stop);
  mtext[1] = static_cast<int32_t>(p.bsz);
  for (int64_t i = 0; i < kMaxBsz; ++i) first_token_slot(p, i, mtext);
}

}  // namespace msgqueue
}  // namespace fd_mtp
