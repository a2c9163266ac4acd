// fd_mtp_speculate_save_output, fd_mtp_speculate_get_output,
// fd_mtp_mtp_save_first_token (spec §5.11, §6.8): host ops that send / receive
// the speculative decoder's output messages through a SysV message queue.
//
// The payload is built by custom_ops/kernels/msgqueue.h; this file holds the
// checks and the SysV calls. Differences from upstream:
// * the queue id, message id and ftok path arrive as attributes (the Python
//   wrapper resolves INFERENCE_MSG_QUEUE_ID / INFERENCE_MSG_ID); no environment reads,
//   no function statics (key and queue handle are looked up on every call, so
//   a process can talk to several queues);
// * a failing ftok / msgget / msgsnd / msgrcv raises (message carries
//   strerror and "[errno N]", which the wrapper turns into OSError) instead of
//   printing "full msg buffer" or reporting "no message";
// * every slot of a first-token message is written (no stale slots).
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/types.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "check.h"
#include "ops.h"
#include "../kernels/msgqueue.h"

namespace {
using paddle::DataType;
namespace mq = fd_mtp::msgqueue;

// The SysV message: `long mtype` followed by the int32 payload, exactly
// upstream's struct speculate_msgdata (msgsnd / msgrcv sizes exclude mtype).
struct Message {
  long mtype;
  int32_t mtext[mq::kMessageInts];
};
static_assert(sizeof(int) == 4, "the wire format is built from 4-byte ints");

// Turns a msgqueue.h status into an exception naming the argument.
void report_status(const char* op, const fd_mtp::KernelStatus& st,
                   const char* bsz_arg) {
  const fd_mtp::StatusInfo table[] = {
      {mq::kBatchTooLarge, bsz_arg,
       "has {value} rows but a message holds at most {limit} requests "
       "(MAX_BSZ of the wire format)"},
      {mq::kBadMsgId, "msg_id",
       "is {value}; 2 and negative ids are reserved (-2 means \"no output\")"},
      {mq::kBadAcceptNum, "accept_num",
       "is {value} but must be in [0, {limit}]: a request sends at most "
       "min(accept_tokens columns, MAX_DRAFT_TOKENS 6) tokens"},
  };
  fd_mtp::check::status(op, st, table);
}

void check_message(const char* op, int64_t bsz, const char* bsz_arg,
                   int64_t msg_id) {
  fd_mtp::KernelStatus st{};
  mq::message_check(bsz, msg_id, &st);
  report_status(op, st, bsz_arg);
}

// A read-only input on the host: CPU tensors as they are, GPU tensors copied
// to the host (synchronously, like upstream's copy_to(CPUPlace, true)).
paddle::Tensor on_host(const char* op, const char* arg, const paddle::Tensor& t) {
  if (t.is_cpu()) return t;
#ifdef PADDLE_WITH_CUDA
  if (t.is_gpu()) return t.copy_to(paddle::CPUPlace(), true);
#endif
  fd_mtp::check::unsupported_place(op, arg, t);
}

[[noreturn]] void sys_fail(const char* op, const char* arg, const char* what,
                           int err) {
  fd_mtp::check::fail(op, arg, what, ": ", std::strerror(err), " [errno ", err,
                      "]");
}

// The queue named by (ftok_path, msg_queue_id), created if missing
// (msgget(ftok(path, id), IPC_CREAT | 0666), as upstream).
int open_queue(const char* op, const std::string& ftok_path, int msg_queue_id) {
  errno = 0;
  const key_t key = ftok(ftok_path.c_str(), msg_queue_id);
  if (key == static_cast<key_t>(-1))  // a bad argument: ValueError, not OSError
    fd_mtp::check::fail(op, "ftok_path", "'", ftok_path,
                        "' cannot key a queue (ftok: ", std::strerror(errno), ")");
  const int queue = msgget(key, IPC_CREAT | 0666);
  if (queue == -1) {
    char what[96];
    std::snprintf(what, sizeof(what), "%d: msgget of key 0x%08x failed",
                  msg_queue_id, static_cast<unsigned>(key));
    sys_fail(op, "msg_queue_id", what, errno);
  }
  return queue;
}

// Blocking msgsnd (as upstream): waits while the queue is full; any error
// (EINTR from a signal, EIDRM when the queue is removed, ...) raises.
void send(const char* op, const std::string& ftok_path, int msg_queue_id,
          const Message& msg) {
  const int queue = open_queue(op, ftok_path, msg_queue_id);
  if (msgsnd(queue, &msg, mq::kMessageBytes, 0) == -1) {
    const std::string what =
        std::to_string(msg_queue_id) + ": msgsnd failed";
    sys_fail(op, "msg_queue_id", what.c_str(), errno);
  }
}

// A per-request read-only input with at least bsz entries, on the host.
paddle::Tensor per_request_host(const char* op, const char* arg,
                                const paddle::Tensor& t, DataType dt,
                                int64_t bsz) {
  fd_mtp::check::dtype(op, arg, t, dt);
  const auto& s = t.shape();
  if (!(s.size() == 1 || (s.size() == 2 && s[1] == 1)))
    fd_mtp::check::fail(op, arg, "must have shape [bsz] or [bsz, 1], got ",
                        fd_mtp::check::shape_str(s));
  if (s[0] < bsz)
    fd_mtp::check::fail(op, arg, "has ", s[0], " entries but the batch has ",
                        bsz, " requests");
  return on_host(op, arg, t);
}

// A 2-D int64 matrix [bsz, cols >= min_cols] that defines bsz.
int64_t rows_of(const char* op, const char* arg, const paddle::Tensor& t,
                int64_t min_cols) {
  fd_mtp::check::dtype(op, arg, t, DataType::INT64);
  const auto& s = t.shape();
  if (s.size() != 2)
    fd_mtp::check::fail(op, arg, "must be 2-D [bsz, cols], got shape ",
                        fd_mtp::check::shape_str(s));
  if (s[1] < min_cols)
    fd_mtp::check::fail(op, arg, "needs at least ", min_cols,
                        " columns, got shape ", fd_mtp::check::shape_str(s));
  return s[0];
}

// not_need_stop is read on the host without a copy, as upstream does.
bool host_flag(const char* op, const paddle::Tensor& not_need_stop) {
  fd_mtp::check::scalar(op, "not_need_stop", not_need_stop, DataType::BOOL);
  fd_mtp::check::on_cpu(op, "not_need_stop", not_need_stop);
  return not_need_stop.data<bool>()[0];
}

}  // namespace

// accept_tokens:    [bsz <= 256, W] int64, read (first min(W, 6) columns)
// accept_num:       [>=bsz] int32, read
// not_need_stop:    [1] bool, CPU, read
// seq_lens_decoder: [>=bsz] int32, read
// prompt_lens:      [>=bsz] int64, read
// Nothing is written; one message is sent unless rank_id > 0 and
// !save_each_rank.
void SpeculateSaveOutput(const paddle::Tensor& accept_tokens,
                         const paddle::Tensor& accept_num,
                         const paddle::Tensor& not_need_stop,
                         const paddle::Tensor& seq_lens_decoder,
                         const paddle::Tensor& prompt_lens, int64_t rank_id,
                         bool save_each_rank, bool skip_prefill,
                         int msg_queue_id, int msg_id,
                         const std::string& ftok_path) {
  constexpr const char* kOp = "speculate_save_output";
  const int64_t bsz = rows_of(kOp, "accept_tokens", accept_tokens, 0);
  const int64_t width = accept_tokens.shape()[1];
  check_message(kOp, bsz, "accept_tokens", msg_id);
  const auto num = per_request_host(kOp, "accept_num", accept_num, DataType::INT32, bsz);
  const auto dec = per_request_host(kOp, "seq_lens_decoder", seq_lens_decoder,
                                    DataType::INT32, bsz);
  const auto prompt = per_request_host(kOp, "prompt_lens", prompt_lens,
                                       DataType::INT64, bsz);
  const bool go_on = host_flag(kOp, not_need_stop);
  const auto tokens = on_host(kOp, "accept_tokens", accept_tokens);
  fd_mtp::msgqueue::SaveOutputParams p{tokens.data<int64_t>(), width,
                                       num.data<int32_t>(), dec.data<int32_t>(),
                                       prompt.data<int64_t>(), bsz, go_on,
                                       skip_prefill, msg_id};
  fd_mtp::KernelStatus st{};
  fd_mtp::msgqueue::save_output_check(p, &st);
  report_status(kOp, st, "accept_tokens");
  if (!save_each_rank && rank_id > 0) return;

  Message msg;
  msg.mtype = 1;
  fd_mtp::msgqueue::save_output_message(p, msg.mtext);
  send(kOp, ftok_path, msg_queue_id, msg);
}

// x: [>= 1794] (any shape) int64, CPU, written: x[0 .. 1793] = the message
//    (as int64), or x[0] = -2, x[1] = 0 when wait_flag is false and the queue
//    is empty. Untouched when rank_id > 0 and !get_each_rank.
void SpeculateGetOutput(paddle::Tensor& x, int64_t rank_id, bool wait_flag,
                        bool get_each_rank, int msg_queue_id,
                        const std::string& ftok_path) {
  constexpr const char* kOp = "speculate_get_output";
  fd_mtp::check::dtype(kOp, "x", x, DataType::INT64);
  fd_mtp::check::on_cpu(kOp, "x", x);
  if (x.numel() < mq::kMessageInts)
    fd_mtp::check::fail(kOp, "x", "needs at least ", mq::kMessageInts,
                        " elements (2 + 256 + 256 * 6), got shape ",
                        fd_mtp::check::shape_str(x.shape()));
  if (!get_each_rank && rank_id > 0) return;

  const int queue = open_queue(kOp, ftok_path, msg_queue_id);
  Message msg;
  std::memset(&msg, 0, sizeof(msg));  // a short message leaves zeros, not garbage
  const ssize_t got = msgrcv(queue, &msg, mq::kMessageBytes, 0,
                             wait_flag ? 0 : IPC_NOWAIT);
  int64_t* out = x.data<int64_t>();
  if (got == -1) {
    const int err = errno;
    if (!wait_flag && err == ENOMSG) {
      out[0] = -2;
      out[1] = 0;
      return;
    }
    const std::string what = std::to_string(msg_queue_id) + ": msgrcv failed";
    sys_fail(kOp, "msg_queue_id", what.c_str(), err);
  }
  for (int64_t i = 0; i < mq::kMessageInts; ++i) out[i] = msg.mtext[i];
}

// x:                [bsz <= 256, >= 2] int64, read (x[i,0] target token, x[i,1] draft)
// not_need_stop:    [1] bool, CPU, read
// seq_lens_decoder: [>=bsz] int32, read
// prompt_lens:      [>=bsz] int64, read
// step_idx:         [>=bsz] int64, read
// Nothing is written; one message is sent unless rank_id > 0 and
// !save_each_rank.
void MtpSaveFirstToken(const paddle::Tensor& x,
                       const paddle::Tensor& not_need_stop,
                       const paddle::Tensor& seq_lens_decoder,
                       const paddle::Tensor& prompt_lens,
                       const paddle::Tensor& step_idx, int64_t rank_id,
                       bool save_each_rank, bool skip_chunk_prefill,
                       int msg_queue_id, int msg_id,
                       const std::string& ftok_path) {
  constexpr const char* kOp = "mtp_save_first_token";
  const int64_t bsz = rows_of(kOp, "x", x, 2);
  const int64_t width = x.shape()[1];
  check_message(kOp, bsz, "x", msg_id);
  const auto dec = per_request_host(kOp, "seq_lens_decoder", seq_lens_decoder,
                                    DataType::INT32, bsz);
  const auto prompt = per_request_host(kOp, "prompt_lens", prompt_lens,
                                       DataType::INT64, bsz);
  const auto step = per_request_host(kOp, "step_idx", step_idx, DataType::INT64, bsz);
  const bool go_on = host_flag(kOp, not_need_stop);
  const auto xh = on_host(kOp, "x", x);
  if (!save_each_rank && rank_id > 0) return;

  fd_mtp::msgqueue::FirstTokenParams p{xh.data<int64_t>(), width,
                                       dec.data<int32_t>(), prompt.data<int64_t>(),
                                       step.data<int64_t>(), bsz, go_on,
                                       skip_chunk_prefill, msg_id};
  Message msg;
  msg.mtype = 1;
  fd_mtp::msgqueue::first_token_message(p, msg.mtext);
  send(kOp, ftok_path, msg_queue_id, msg);
}

PD_BUILD_OP(fd_mtp_speculate_save_output)
    .Inputs({"accept_tokens", "accept_num", "not_need_stop", "seq_lens_decoder",
             "prompt_lens"})
    .Attrs({"rank_id: int64_t", "save_each_rank: bool", "skip_prefill: bool",
            "msg_queue_id: int", "msg_id: int", "ftok_path: std::string"})
    .Outputs({})
    .SetKernelFn(PD_KERNEL(SpeculateSaveOutput));

PD_BUILD_OP(fd_mtp_speculate_get_output)
    .Inputs({"x"})
    .Attrs({"rank_id: int64_t", "wait_flag: bool", "get_each_rank: bool",
            "msg_queue_id: int", "ftok_path: std::string"})
    .Outputs({"x_out"})
    .SetInplaceMap({{"x", "x_out"}})
    .SetKernelFn(PD_KERNEL(SpeculateGetOutput));

PD_BUILD_OP(fd_mtp_mtp_save_first_token)
    .Inputs({"x", "not_need_stop", "seq_lens_decoder", "prompt_lens", "step_idx"})
    .Attrs({"rank_id: int64_t", "save_each_rank: bool",
            "skip_chunk_prefill: bool", "msg_queue_id: int", "msg_id: int",
            "ftok_path: std::string"})
    .Outputs({})
    .SetKernelFn(PD_KERNEL(MtpSaveFirstToken));
