// fd_mtp_speculate_save_output, fd_mtp_speculate_get_output,
// fd_mtp_mtp_save_first_token (spec §5.11, §6.8): host ops that send / receive
// the speculative decoder's output messages through a SysV message queue.
// Arguments, checks and registration: fd_mtp/schema/msgqueue.py (generated into
// <op>.gen.h).
//
// The payload is built by custom_ops/kernels/msgqueue.h; this file holds the
// host copies, the Params fill (host pointers) and the SysV calls. Differences
// from upstream:
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

#include <vector>

#include "mtp_save_first_token.gen.h"
#include "speculate_get_output.gen.h"
#include "speculate_get_output_topk.gen.h"
#include "speculate_save_output.gen.h"
#include "speculate_save_output_topk.gen.h"

namespace {
namespace mq = fd_mtp::msgqueue;

// The SysV message: `long mtype` followed by the int32 payload, exactly
// upstream's struct speculate_msgdata (msgsnd / msgrcv sizes exclude mtype).
struct Message {
  long mtype;
  int32_t mtext[mq::kMessageInts];
};
static_assert(sizeof(int) == 4, "the wire format is built from 4-byte ints");

// bs <= MAX_BSZ and a valid msg_id (statuses of the op's table).
template <size_t N>
void check_message(const char* op, int64_t bsz, int64_t msg_id,
                   const fd_mtp::StatusInfo (&table)[N]) {
  fd_mtp::KernelStatus st{};
  mq::message_check(bsz, msg_id, &st);
  fd_mtp::check::status(op, st, table);
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

[[noreturn]] void sys_fail(const char* op, const char* arg, const char* what, int err) {
  fd_mtp::check::fail(op, arg, what, ": ", std::strerror(err), " [errno ", err, "]");
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
    std::snprintf(what, sizeof(what), "%d: msgget of key 0x%08x failed", msg_queue_id,
                  static_cast<unsigned>(key));
    sys_fail(op, "msg_queue_id", what, errno);
  }
  return queue;
}

// The kernel's largest SysV message (/proc/sys/kernel/msgmax); -1 when unknown.
long msgmax() {
  std::FILE* f = std::fopen("/proc/sys/kernel/msgmax", "r");
  if (f == nullptr) return -1;
  long limit = -1;
  if (std::fscanf(f, "%ld", &limit) != 1) limit = -1;
  std::fclose(f);
  return limit;
}

// Blocking msgsnd (as upstream): waits while the queue is full; any error
// (EINTR from a signal, EIDRM when the queue is removed, ...) raises.
void send(const char* op, const std::string& ftok_path, int msg_queue_id, const Message& msg) {
  const int queue = open_queue(op, ftok_path, msg_queue_id);
  if (msgsnd(queue, &msg, mq::kMessageBytes, 0) == -1) {
    const std::string what = std::to_string(msg_queue_id) + ": msgsnd failed";
    sys_fail(op, "msg_queue_id", what.c_str(), errno);
  }
}

// A message of `words` int32 words behind a `long mtype` (the top-k layout's
// size depends on max_bsz): the buffer is longs, so the payload is aligned as
// in upstream's struct.
struct VarMessage {
  explicit VarMessage(int64_t words)
      : buf(1 + static_cast<size_t>((words * 4 + sizeof(long) - 1) / sizeof(long)), 0),
        bytes(static_cast<size_t>(words) * 4) {}
  void* data() { return buf.data(); }
  int32_t* words() { return reinterpret_cast<int32_t*>(buf.data() + 1); }
  std::vector<long> buf;
  size_t bytes;  // payload bytes (msgsnd / msgrcv size)
};

}  // namespace

// Checked by the schema: accept_tokens [bsz, W] int64; accept_num,
// seq_lens_decoder [>=bsz] int32; prompt_lens [>=bsz] int64; not_need_stop [1]
// bool on the CPU (read on the host without a copy, as upstream). Here: bsz <=
// 256, msg_id, every sent count in [0, min(W, 6)] (on every rank), then one
// message is sent unless rank_id > 0 and !save_each_rank. Nothing is written.
void speculate_save_output_apply(SpeculateSaveOutputArgs& a) {
  const int64_t bsz = a.dims.B;
  check_message(a.op, bsz, a.msg_id, kSpeculateSaveOutputStatus);
  const auto num = on_host(a.op, "accept_num", a.accept_num);
  const auto dec = on_host(a.op, "seq_lens_decoder", a.seq_lens_decoder);
  const auto prompt = on_host(a.op, "prompt_lens", a.prompt_lens);
  const bool go_on = a.not_need_stop.data<bool>()[0];
  const auto tokens = on_host(a.op, "accept_tokens", a.accept_tokens);
  mq::SaveOutputParams p{tokens.data<int64_t>(),
                         a.dims.W,
                         num.data<int32_t>(),
                         dec.data<int32_t>(),
                         prompt.data<int64_t>(),
                         bsz,
                         go_on,
                         a.skip_prefill,
                         a.msg_id};
  fd_mtp::KernelStatus st{};
  mq::save_output_check(p, &st);
  fd_mtp::check::status(a.op, st, kSpeculateSaveOutputStatus);
  if (!a.save_each_rank && a.rank_id > 0) return;

  Message msg;
  msg.mtype = 1;
  mq::save_output_message(p, msg.mtext);
  send(a.op, a.ftok_path, a.msg_queue_id, msg);
}

// Checked by the schema: x [>= 1794] (any shape) int64, CPU, written.
// x[0 .. 1793] = the message (as int64), or x[0] = -2, x[1] = 0 when wait_flag
// is false and the queue is empty. Untouched when rank_id > 0 and
// !get_each_rank.
void speculate_get_output_apply(SpeculateGetOutputArgs& a) {
  if (!a.get_each_rank && a.rank_id > 0) return;

  const int queue = open_queue(a.op, a.ftok_path, a.msg_queue_id);
  Message msg;
  std::memset(&msg, 0, sizeof(msg));  // a short message leaves zeros, not garbage
  const ssize_t got = msgrcv(queue, &msg, mq::kMessageBytes, 0, a.wait_flag ? 0 : IPC_NOWAIT);
  int64_t* out = a.x.data<int64_t>();
  if (got == -1) {
    const int err = errno;
    if (!a.wait_flag && err == ENOMSG) {
      out[0] = -2;
      out[1] = 0;
      return;
    }
    const std::string what = std::to_string(a.msg_queue_id) + ": msgrcv failed";
    sys_fail(a.op, "msg_queue_id", what.c_str(), err);
  }
  for (int64_t i = 0; i < mq::kMessageInts; ++i) out[i] = msg.mtext[i];
}

// Checked by the schema: x [bsz, >= 2] int64 (x[i,0] target token, x[i,1]
// draft); seq_lens_decoder [>=bsz] int32; prompt_lens, step_idx [>=bsz] int64;
// not_need_stop [1] bool on the CPU. Here: bsz <= 256 and msg_id (on every
// rank), then one message is sent unless rank_id > 0 and !save_each_rank.
// Nothing is written.
void mtp_save_first_token_apply(MtpSaveFirstTokenArgs& a) {
  const int64_t bsz = a.dims.B;
  check_message(a.op, bsz, a.msg_id, kMtpSaveFirstTokenStatus);
  const auto dec = on_host(a.op, "seq_lens_decoder", a.seq_lens_decoder);
  const auto prompt = on_host(a.op, "prompt_lens", a.prompt_lens);
  const auto step = on_host(a.op, "step_idx", a.step_idx);
  const bool go_on = a.not_need_stop.data<bool>()[0];
  const auto xh = on_host(a.op, "x", a.x);
  if (!a.save_each_rank && a.rank_id > 0) return;

  mq::FirstTokenParams p{xh.data<int64_t>(),
                         a.dims.W,
                         dec.data<int32_t>(),
                         prompt.data<int64_t>(),
                         step.data<int64_t>(),
                         bsz,
                         go_on,
                         a.skip_chunk_prefill,
                         a.msg_id};
  Message msg;
  msg.mtype = 1;
  mq::first_token_message(p, msg.mtext);
  send(a.op, a.ftok_path, a.msg_queue_id, msg);
}

// Checked by the schema: sampled_token_ids [>=bsz, Ws] int64; logprob_token_ids
// [N, C] int64, logprob_scores [N, C] float32, logprob_ranks [>=N] int64;
// token_num_per_batch [bsz] int32; cu_batch_token_offset, seq_lens_decoder
// [>=bsz] int32; prompt_lens [>=bsz] int64; not_need_stop [1] bool on the CPU;
// 1 <= max_bsz <= 512. Here (on every rank): bsz <= max_bsz, msg_id, C <= 21,
// every sent count in [0, min(6, Ws)] with its logprob rows inside [0, N);
// then one message is sent unless rank_id > 0 and !save_each_rank. Nothing is
// written.
void speculate_save_output_topk_apply(SpeculateSaveOutputTopkArgs& a) {
  const auto sampled = on_host(a.op, "sampled_token_ids", a.sampled_token_ids);
  const auto ids = on_host(a.op, "logprob_token_ids", a.logprob_token_ids);
  const auto scores = on_host(a.op, "logprob_scores", a.logprob_scores);
  const auto ranks = on_host(a.op, "logprob_ranks", a.logprob_ranks);
  const auto num = on_host(a.op, "token_num_per_batch", a.token_num_per_batch);
  const auto cu = on_host(a.op, "cu_batch_token_offset", a.cu_batch_token_offset);
  const auto dec = on_host(a.op, "seq_lens_decoder", a.seq_lens_decoder);
  const auto prompt = on_host(a.op, "prompt_lens", a.prompt_lens);
  mq::SaveTopkParams p{sampled.data<int64_t>(),
                       a.dims.Ws,
                       ids.data<int64_t>(),
                       scores.data<float>(),
                       ranks.data<int64_t>(),
                       a.dims.N,
                       a.dims.C,
                       num.data<int32_t>(),
                       cu.data<int32_t>(),
                       dec.data<int32_t>(),
                       prompt.data<int64_t>(),
                       a.dims.B,
                       a.max_bsz,
                       a.not_need_stop.data<bool>()[0],
                       a.message_flag,
                       a.msg_id};
  fd_mtp::KernelStatus st{};
  mq::save_topk_check(p, &st);
  fd_mtp::check::status(a.op, st, kSpeculateSaveOutputTopkStatus);
  if (!a.save_each_rank && a.rank_id > 0) return;

  VarMessage msg(mq::topk_sent_words(a.max_bsz));
  msg.buf[0] = 1;  // mtype
  mq::save_topk_message(p, msg.words());
  const int queue = open_queue(a.op, a.ftok_path, a.msg_queue_id);
  if (msgsnd(queue, msg.data(), msg.bytes, 0) == -1) {
    const int err = errno;
    const std::string size = std::to_string(msg.bytes);
    std::string what =
        std::to_string(a.msg_queue_id) + ": msgsnd of a " + size + "-byte top-k message failed";
    const long limit = msgmax();
    if (err == EINVAL && limit > 0 && static_cast<long>(msg.bytes) > limit)
      what += " (it exceeds this kernel's kernel.msgmax = " + std::to_string(limit) +
              ": raise it, e.g. sysctl -w kernel.msgmax=" + size +
              " and kernel.msgmnb >= that, or pass a smaller max_bsz to writer and reader alike)";
    sys_fail(a.op, "msg_queue_id", what.c_str(), err);
  }
}

// Checked by the schema: output_tokens, output_ranks int64 and output_scores
// float32 on the CPU (flat), 0 <= real_k <= 20, 1 <= max_bsz <= 512. Here:
// the buffers hold a message of max_bsz requests; a received message's bs and
// counts are in range (else nothing is written). rank_id is unused (as
// upstream). With wait_flag false and an empty queue: output_tokens[0..2] =
// -2, 0, 0.
void speculate_get_output_topk_apply(SpeculateGetOutputTopkArgs& a) {
  mq::GetTopkParams p{a.output_tokens.data<int64_t>(),
                      a.output_tokens.numel(),
                      a.output_scores.data<float>(),
                      a.output_scores.numel(),
                      a.output_ranks.data<int64_t>(),
                      a.output_ranks.numel(),
                      a.real_k,
                      a.max_bsz};
  fd_mtp::KernelStatus st{};
  mq::get_topk_check(p, &st);
  fd_mtp::check::status(a.op, st, kSpeculateGetOutputTopkStatus);

  const int queue = open_queue(a.op, a.ftok_path, a.msg_queue_id);
  VarMessage msg(mq::topk_sent_words(a.max_bsz));
  const ssize_t got = msgrcv(queue, msg.data(), msg.bytes, 0, a.wait_flag ? 0 : IPC_NOWAIT);
  if (got == -1) {
    const int err = errno;
    if (!a.wait_flag && err == ENOMSG) {
      mq::get_topk_empty(p);
      return;
    }
    const std::string what = std::to_string(a.msg_queue_id) + ": msgrcv failed";
    sys_fail(a.op, "msg_queue_id", what.c_str(), err);
  }
  mq::get_topk_check_message(msg.words(), a.max_bsz, &st);
  fd_mtp::check::status(a.op, st, kSpeculateGetOutputTopkStatus);
  mq::get_topk_write(p, msg.words());
}
