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
#include <cstring>

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

// ------------------------------------------ speculate_save_output_topk ---
//
// The logprob variant (FastDeploy's speculate_save_output_with_topk.cc /
// speculate_get_output_with_topk.cc), a different wire layout:
//
//   long mtype = 1
//   int32 meta[3 + max_bsz]   meta[0] +-msg_id, meta[1] message_flag (3: target,
//                             4: draft), meta[2] bs, meta[3 + i] token count of
//                             request i
//   max_bsz slots of {int32 tokens[6 * 21]; float32 scores[6 * 21];
//                     int32 ranks[6]}: token j of request i at
//                     tokens[21 j .. 21 j + 20] (the sampled token, then the
//                     top-20 logprob ids), scores likewise, ranks[j] the
//                     sampled token's rank
//
// max_bsz is 512 upstream (MAX_BSZ); msgsnd / msgrcv move sizeof(struct) -
// sizeof(long) bytes, i.e. the words above plus the struct's tail padding to
// 8 bytes (one zero word when their count is odd).

constexpr int64_t kTopkK = 20;                                             // K: logprobs per token
constexpr int64_t kTopkColumns = kTopkK + 1;                               // sampled + top-K
constexpr int64_t kTopkMaxTokens = 6;                                      // MAX_DRAFT_TOKEN_NUM
constexpr int64_t kTopkSlotEntries = kTopkMaxTokens * kTopkColumns;        // 126
constexpr int64_t kTopkSlotWords = 2 * kTopkSlotEntries + kTopkMaxTokens;  // 258
constexpr int64_t kTopkMetaWords = 3;                                      // before the counts
constexpr int64_t kTopkDefaultMaxBsz = 512;

// int32 words of a top-k message of `max_bsz` slots (meta + slots, no padding).
inline int64_t topk_message_words(int64_t max_bsz) {
  return kTopkMetaWords + max_bsz + max_bsz * kTopkSlotWords;
}

// Words msgsnd sends: the struct's size minus its `long`, tail padding included.
inline int64_t topk_sent_words(int64_t max_bsz) {
  const int64_t w = topk_message_words(max_bsz);
  return w + (w % 2);
}

enum : int32_t {
  kTopkBatchTooLarge = 1,  // bs > max_bsz
  kTopkBadMsgId = 2,       // msg_id 2 or negative
  kTopkTokenNum = 3,       // a sent count outside [0, min(6, sampled columns)]
  kTopkOffset = 4,         // a request's logprob rows outside [0, rows)
  kTopkWideLogprobs = 5,   // logprob arrays wider than 21 columns
};

struct SaveTopkParams {
  const int64_t* sampled_token_ids;  // [>= bsz, sampled_cols]
  int64_t sampled_cols;
  const int64_t* logprob_token_ids;  // [rows, cols]
  const float* logprob_scores;       // [rows, cols]
  const int64_t* logprob_ranks;      // [rows]
  int64_t rows;
  int64_t cols;                          // 1 .. 21
  const int32_t* token_num_per_batch;    // [bsz]
  const int32_t* cu_batch_token_offset;  // [>= bsz]
  const int32_t* seq_lens_decoder;       // [>= bsz]
  const int64_t* prompt_lens;            // [>= bsz]
  int64_t bsz;
  int64_t max_bsz;
  bool not_need_stop;
  int32_t message_flag;
  int32_t msg_id;
};

// Tokens request i sends: 0 while it is in its prompt, else its count.
inline int64_t topk_count(const SaveTopkParams& p, int64_t i) {
  if (static_cast<int64_t>(p.seq_lens_decoder[i]) < p.prompt_lens[i]) return 0;
  return p.token_num_per_batch[i];
}

// Everything the message builder relies on, before anything is built or
// sent. Upstream checks none of it (it reads past the arrays instead).
inline void save_topk_check(const SaveTopkParams& p, KernelStatus* st) {
  if (p.bsz > p.max_bsz) report(st, kTopkBatchTooLarge, -1, p.bsz, p.max_bsz);
  if (p.msg_id == 2 || p.msg_id < 0) report(st, kTopkBadMsgId, -1, p.msg_id, 2);
  if (p.cols > kTopkColumns) report(st, kTopkWideLogprobs, -1, p.cols, kTopkColumns);
  const int64_t limit = p.sampled_cols < kTopkMaxTokens ? p.sampled_cols : kTopkMaxTokens;
  for (int64_t i = 0; i < p.bsz && st->code == 0; ++i) {
    const int64_t n = topk_count(p, i);
    const int32_t r = static_cast<int32_t>(i);
    if (n < 0 || n > limit) {
      report(st, kTopkTokenNum, r, n, limit);
    } else if (n > 0) {
      const int64_t start = p.cu_batch_token_offset[i];
      if (start < 0)
        report(st, kTopkOffset, r, start, p.rows);
      else if (start + n > p.rows)
        report(st, kTopkOffset, r, start + n, p.rows);
    }
  }
}

inline int32_t float_word(float f) {
  int32_t w;
  static_assert(sizeof(w) == sizeof(f), "float32 is 4 bytes");
  std::memcpy(&w, &f, sizeof(w));
  return w;
}

// Fills all topk_sent_words(max_bsz) words. Slots past bs and tokens past a
// request's count are zero (upstream keeps the message in a function static,
// so they repeat an earlier message's values). Entry k of token j: k = 0 the
// sampled token (sampled_token_ids[i, j]) with score column 0; 0 < k < cols
// the logprob row's column k; k >= cols token -1, score 0 (as upstream).
// Token ids are narrowed to int32 like upstream's (int) cast.
inline void save_topk_message(const SaveTopkParams& p, int32_t* words) {
  const int64_t total = topk_sent_words(p.max_bsz);
  for (int64_t w = 0; w < total; ++w) words[w] = 0;
  words[0] = header_word(p.msg_id, p.not_need_stop);
  words[1] = p.message_flag;
  words[2] = static_cast<int32_t>(p.bsz);
  int32_t* slots = words + kTopkMetaWords + p.max_bsz;
  for (int64_t i = 0; i < p.bsz; ++i) {
    const int64_t n = topk_count(p, i);
    words[kTopkMetaWords + i] = static_cast<int32_t>(n);
    int32_t* tokens = slots + i * kTopkSlotWords;
    int32_t* scores = tokens + kTopkSlotEntries;
    int32_t* ranks = scores + kTopkSlotEntries;
    const int64_t start = n > 0 ? p.cu_batch_token_offset[i] : 0;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t row = start + j;
      for (int64_t k = 0; k < kTopkColumns; ++k) {
        int32_t* tok = tokens + j * kTopkColumns + k;
        int32_t* score = scores + j * kTopkColumns + k;
        if (k == 0) {
          *tok = static_cast<int32_t>(p.sampled_token_ids[i * p.sampled_cols + j]);
          *score = float_word(p.logprob_scores[row * p.cols]);
        } else if (k < p.cols) {
          *tok = static_cast<int32_t>(p.logprob_token_ids[row * p.cols + k]);
          *score = float_word(p.logprob_scores[row * p.cols + k]);
        } else {
          *tok = -1;
          *score = float_word(0.0f);
        }
      }
      ranks[j] = static_cast<int32_t>(p.logprob_ranks[row]);
    }
  }
}

// ------------------------------------------- speculate_get_output_topk ---

enum : int32_t {
  kTopkOutputTokens = 1,  // output_tokens shorter than 3 + max_bsz * 127
  kTopkOutputScores = 2,  // output_scores shorter than max_bsz * 126
  kTopkOutputRanks = 3,   // output_ranks shorter than max_bsz * 6
  kTopkBadMessage = 4,    // a received message's bs or a count out of range
};

struct GetTopkParams {
  int64_t* output_tokens;  // flat, >= 3 + max_bsz + max_bsz * 126
  int64_t tokens_len;
  float* output_scores;  // flat, >= max_bsz * 126
  int64_t scores_len;
  int64_t* output_ranks;  // flat, >= max_bsz * 6
  int64_t ranks_len;
  int64_t real_k;  // 0 .. 20: entries 0 .. real_k of each token are copied
  int64_t max_bsz;
};

// The output buffers hold a full message (FastDeploy's token processor:
// [3 + 512 + 512 * 126, 1], [512 * 126, 1], [512 * 6, 1]).
inline void get_topk_check(const GetTopkParams& p, KernelStatus* st) {
  const int64_t tokens = kTopkMetaWords + p.max_bsz + p.max_bsz * kTopkSlotEntries;
  if (p.tokens_len < tokens) report(st, kTopkOutputTokens, -1, p.tokens_len, tokens);
  if (p.scores_len < p.max_bsz * kTopkSlotEntries)
    report(st, kTopkOutputScores, -1, p.scores_len, p.max_bsz * kTopkSlotEntries);
  if (p.ranks_len < p.max_bsz * kTopkMaxTokens)
    report(st, kTopkOutputRanks, -1, p.ranks_len, p.max_bsz * kTopkMaxTokens);
}

// A received message must describe at most max_bsz requests of at most 6
// tokens (upstream trusts it and writes past its buffers otherwise).
inline void get_topk_check_message(const int32_t* words, int64_t max_bsz, KernelStatus* st) {
  const int64_t bsz = words[2];
  if (bsz < 0 || bsz > max_bsz) {
    report(st, kTopkBadMessage, -1, bsz, max_bsz);
    return;
  }
  for (int64_t i = 0; i < bsz; ++i) {
    const int64_t n = words[kTopkMetaWords + i];
    if (n < 0 || n > kTopkMaxTokens)
      report(st, kTopkBadMessage, static_cast<int32_t>(i), n, kTopkMaxTokens);
  }
}

// Nothing received (non-blocking, empty queue): -2, 0, 0 in front.
inline void get_topk_empty(const GetTopkParams& p) {
  p.output_tokens[0] = -2;
  p.output_tokens[1] = 0;
  p.output_tokens[2] = 0;
}

// Writes a received message as upstream: the three meta words, the counts,
// and for token j of request i its entries 0 .. real_k (tokens widened to
// int64, scores as float32) and its rank; everything else stays untouched.
inline void get_topk_write(const GetTopkParams& p, const int32_t* words) {
  const int64_t bsz = words[2];
  for (int64_t m = 0; m < kTopkMetaWords; ++m) p.output_tokens[m] = words[m];
  const int32_t* slots = words + kTopkMetaWords + p.max_bsz;
  const int64_t token_base = kTopkMetaWords + p.max_bsz;
  for (int64_t i = 0; i < bsz; ++i) {
    const int64_t n = words[kTopkMetaWords + i];
    p.output_tokens[kTopkMetaWords + i] = n;
    const int32_t* tokens = slots + i * kTopkSlotWords;
    const int32_t* scores = tokens + kTopkSlotEntries;
    const int32_t* ranks = scores + kTopkSlotEntries;
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t k = 0; k <= p.real_k; ++k) {
        const int64_t e = j * kTopkColumns + k;
        p.output_tokens[token_base + i * kTopkSlotEntries + e] = tokens[e];
        float f;
        std::memcpy(&f, &scores[e], sizeof(f));
        p.output_scores[i * kTopkSlotEntries + e] = f;
      }
      p.output_ranks[i * kTopkMaxTokens + j] = ranks[j];
    }
  }
}

}  // namespace msgqueue
}  // namespace fd_mtp
