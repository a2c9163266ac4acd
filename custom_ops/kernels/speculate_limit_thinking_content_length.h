// speculate_limit_thinking_content_length (spec §5.9): the thinking / reply
// budget of reasoning models, applied to the tokens a request emitted this
// step. Per request, a state machine in limit_status walks its accept_num
// tokens: 0 = thinking; 1..J = injecting inject_token_ids[status - 1] (J =
// inject length); done = J + 1 (1 when J = 0) = thinking over; from
// reply_base = done + 1 on, status - reply_base counts reply tokens. A token
// replaced by an injected token or by the forced EOS of a full reply ends the
// request's tokens of this step (accept_num and step_idx shrink).
#pragma once

#include <cstdint>

#include "common.h"

namespace fd_mtp {

enum LimitThinkingStatus : int32_t {
  kLimitAcceptNum = 1,       // accept_num > next_tokens' columns
  kLimitStatusOverflow = 2,  // limit_status would leave int32
  kLimitReplyOverflow = 3,   // max_reply_lens would leave int32
};

struct LimitThinkingParams {
  int64_t* next_tokens;  // [bs, tokens_per_step], written
  int64_t tokens_per_step;
  const int32_t* max_think_lens;  // < 0: thinking is not cut (think_end_id still ends it)
  int32_t* max_reply_lens;        // < 0: replies are not limited; written
  int64_t* step_idx;              // written
  int32_t* limit_status;          // written
  int32_t* accept_num;            // written
  const bool* stop_flags;
  const int64_t* eos_token_ids;  // [eos_len]
  int64_t eos_len;
  const int64_t* inject_token_ids;  // [inject_len]
  int64_t inject_len;
  int64_t think_end_id;
  bool splitwise_role_is_decode;
  int64_t bs;
};

// The outcome of request b's step: what apply writes.
struct LimitThinkingOutcome {
  bool runs;
  int64_t status;
  int64_t max_reply_len;
  int64_t accept_num;
};

// Runs request b's state machine. With `write`, replaced tokens are stored in
// next_tokens as they are decided; without, nothing is written (the check pass).
FD_HOST_DEVICE inline LimitThinkingOutcome limit_thinking_run(const LimitThinkingParams& p,
                                                              int64_t b, bool write) {
  LimitThinkingOutcome out{false, 0, 0, 0};
  const int64_t a = p.accept_num[b];
  if (a <= 0 || p.stop_flags[b]) return out;
  const int64_t max_think = p.max_think_lens[b];
  int64_t max_reply = p.max_reply_lens[b];
  if (max_think < 0 && max_reply < 0) return out;
  out.runs = true;
  const int64_t inject_len = p.inject_len;
  const int64_t done = inject_len > 0 ? inject_len + 1 : 1;
  const int64_t reply_base = done + 1;
  int64_t status = p.limit_status[b] < 0 ? 0 : p.limit_status[b];
  int64_t accepted = a;
  const int64_t base_step = p.step_idx[b] - a + 1;
  int64_t* row = p.next_tokens + b * p.tokens_per_step;
  for (int64_t o = 0; o < a; ++o) {
    int64_t token = row[o];
    const int64_t step = base_step + o;
    const int64_t previous = status;
    bool truncate = false;
    // (1) thinking ends on think_end_id; the reply budget gets 2 more tokens.
    if (status == 0 && token == p.think_end_id) {
      status = done;
      if (max_reply >= 0) max_reply += 2;
    }
    // (2) the thinking budget: start injecting, then inject.
    if (max_think >= 0 && status < reply_base) {
      if (max_think > 0) {
        if (status == 0 && step - 1 == max_think) status = inject_len > 0 ? 1 : done;
      } else if (status == 0) {
        if (!p.splitwise_role_is_decode)
          status = inject_len > 0 ? 1 : done;
        else
          status = inject_len > 0 ? 2 : done + 1;
      }
      if (status == 0 && inject_len > 0) {
        for (int64_t i = 0; i < p.eos_len; ++i) {
          if (p.eos_token_ids[i] == token) {
            status = 1;
            break;
          }
        }
      }
      if (inject_len > 0 && status >= 1 && status <= inject_len) {
        token = p.inject_token_ids[status - 1];
        status += 1;
        if (status > done) status = done;
        truncate = true;
      }
    }
    const bool became_done = status == done && previous != done && previous < reply_base;
    // (3) the reply budget, from the token after the one that ended thinking.
    if (max_reply >= 0 && !became_done) {
      if (status == done) status = reply_base;
      if (status >= reply_base) {
        const int64_t reply_len = status - reply_base;
        if (reply_len >= max_reply) {
          if (p.eos_len > 0) token = p.eos_token_ids[0];
          status = reply_base + max_reply;
          truncate = true;
        } else {
          status = reply_base + reply_len + 1;
        }
      }
    }
    if (write) row[o] = token;
    if (truncate) {
      accepted = o + 1;
      break;
    }
  }
  out.status = status;
  out.max_reply_len = max_reply;
  out.accept_num = accepted;
  return out;
}

FD_HOST_DEVICE inline void limit_thinking_check(const LimitThinkingParams& p, int64_t b,
                                                KernelStatus* st) {
  const int64_t a = p.accept_num[b];
  if (a <= 0 || p.stop_flags[b]) return;
  if (p.max_think_lens[b] < 0 && p.max_reply_lens[b] < 0) return;
  if (a > p.tokens_per_step) {  // the request reads next_tokens[b, 0 .. a - 1]
    report(st, kLimitAcceptNum, b, a, p.tokens_per_step);
    return;
  }
  const LimitThinkingOutcome out = limit_thinking_run(p, b, false);
  if (!out.runs) return;
  if (out.status > INT32_MAX)
    report(st, kLimitStatusOverflow, b, out.status, INT32_MAX);
  else if (out.max_reply_len > INT32_MAX)
    report(st, kLimitReplyOverflow, b, out.max_reply_len, INT32_MAX);
}

FD_HOST_DEVICE inline void limit_thinking_apply(const LimitThinkingParams& p, int64_t b) {
  const int64_t a = p.accept_num[b];
  const LimitThinkingOutcome out = limit_thinking_run(p, b, true);
  if (!out.runs) return;
  p.step_idx[b] -= a - out.accept_num;
  p.accept_num[b] = static_cast<int32_t>(out.accept_num);
  p.limit_status[b] = static_cast<int32_t>(out.status);
  p.max_reply_lens[b] = static_cast<int32_t>(out.max_reply_len);
}

inline KernelStatus limit_thinking_cpu(const LimitThinkingParams& p) {
  KernelStatus st{};
  for (int64_t b = 0; b < p.bs && st.code == 0; ++b) limit_thinking_check(p, b, &st);
  if (st.code != 0) return st;
  for (int64_t b = 0; b < p.bs; ++b) limit_thinking_apply(p, b);
  return st;
}

}  // namespace fd_mtp
