// Runs the CPU decoder layer (custom_ops/kernels/decoder_layer.h) and its matrix products
// (cpu_gemm.h) twice on the same random inputs: with the AVX2 code and with the portable code.
// Prints one line per case, "<case> same" or "<case> differ <first index>"; tests/ops/
// test_cpu_portable_paths.py compiles and runs it (the two paths must return the same bits).
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "decoder_layer.h"

namespace {

std::vector<float> random_floats(std::mt19937& gen, size_t n, float scale) {
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

int first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<int>(i);
  return -1;
}

void report(const char* what, int64_t a, int64_t b, int64_t c, int diff) {
  if (diff < 0)
    std::printf("%s %lld %lld %lld same\n", what, (long long)a, (long long)b, (long long)c);
  else
    std::printf("%s %lld %lld %lld differ %d\n", what, (long long)a, (long long)b, (long long)c,
                diff);
}

void gemm_case(std::mt19937& gen, int64_t M, int64_t K, int64_t N) {
  auto x = random_floats(gen, M * K, 1.f), w = random_floats(gen, K * N, 1.f);
  std::vector<float> y0(M * N), y1(M * N);
  fd_mtp::cpu_gemm::gemm(x.data(), K, w.data(), N, y0.data(), N, M, K, 0, N, true);
  fd_mtp::cpu_gemm::gemm(x.data(), K, w.data(), N, y1.data(), N, M, K, 0, N, false);
  report("gemm", M, K, N, first_difference(y0, y1));
}

void layer_case(std::mt19937& gen, int64_t tokens, int64_t context, int64_t head_dim) {
  const int64_t H = 48, hq = 4, hkv = 2, I = 72, bs = 4;
  const int64_t blocks = (context + tokens) / bs + 2;
  auto hidden = random_floats(gen, tokens * H, 1.f), residual = random_floats(gen, tokens * H, 1.f);
  auto n1 = random_floats(gen, H, 0.2f), n2 = random_floats(gen, H, 0.2f);
  for (auto& v : n1) v += 1.f;
  for (auto& v : n2) v += 1.f;
  auto wq = random_floats(gen, H * hq * head_dim, 0.15f),
       wk = random_floats(gen, H * hkv * head_dim, 0.15f);
  auto wv = random_floats(gen, H * hkv * head_dim, 0.15f),
       wo = random_floats(gen, hq * head_dim * H, 0.15f);
  auto wg = random_floats(gen, H * I, 0.15f), wu = random_floats(gen, H * I, 0.15f);
  auto wd = random_floats(gen, I * H, 0.12f);
  auto cache = random_floats(gen, blocks * hkv * bs * head_dim, 1.f);
  std::vector<int32_t> table(blocks), cu{0, static_cast<int32_t>(tokens)}, bid(tokens, 0),
      dec{static_cast<int32_t>(context)};
  for (int64_t i = 0; i < blocks; ++i) table[i] = static_cast<int32_t>(blocks - 1 - i);
  std::vector<float> cosv(tokens * head_dim / 2), sinv(tokens * head_dim / 2);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      const double a = (context + t) * std::pow(10000.0, -2.0 * i / head_dim);
      cosv[t * head_dim / 2 + i] = static_cast<float>(std::cos(a));
      sinv[t * head_dim / 2 + i] = static_cast<float>(std::sin(a));
    }
  std::vector<float> outs[2], res[2], kcs[2], vcs[2];
  for (int path = 0; path < 2; ++path) {
    kcs[path] = cache;
    vcs[path] = cache;
    outs[path].assign(tokens * H, 0.f);
    res[path].assign(tokens * H, 0.f);
    std::vector<float> ws(fd_mtp::decoder_layer_workspace_floats(tokens, H, hq, hkv, head_dim, I));
    fd_mtp::DecoderLayerParams p{};
    p.hidden = hidden.data();
    p.residual = residual.data();
    p.input_norm_weight = n1.data();
    p.q_weight = wq.data();
    p.k_weight = wk.data();
    p.v_weight = wv.data();
    p.o_weight = wo.data();
    p.post_norm_weight = n2.data();
    p.gate_weight = wg.data();
    p.up_weight = wu.data();
    p.down_weight = wd.data();
    p.key_cache = kcs[path].data();
    p.value_cache = vcs[path].data();
    p.block_tables = table.data();
    p.cu_seqlens_q = cu.data();
    p.batch_id_per_token = bid.data();
    p.seq_lens_decoder = dec.data();
    p.rope_cos = cosv.data();
    p.rope_sin = sinv.data();
    p.num_tokens = tokens;
    p.bsz = 1;
    p.hidden_size = H;
    p.q_heads = hq;
    p.kv_heads = hkv;
    p.head_dim = head_dim;
    p.intermediate_size = I;
    p.num_blocks = blocks;
    p.block_size = bs;
    p.table_width = blocks;
    p.eps = 1e-5f;
    p.scale = 1.f / std::sqrt(static_cast<float>(head_dim));
    p.avx2 = path == 0;
    p.workspace = ws.data();
    p.out = outs[path].data();
    p.residual_out = res[path].data();
    if (fd_mtp::decoder_layer_cpu(p).code != 0) {
      std::printf("layer %lld %lld %lld status\n", (long long)tokens, (long long)context,
                  (long long)head_dim);
      return;
    }
  }
  int diff = first_difference(outs[0], outs[1]);
  if (diff < 0) diff = first_difference(res[0], res[1]);
  if (diff < 0) diff = first_difference(kcs[0], kcs[1]);
  if (diff < 0) diff = first_difference(vcs[0], vcs[1]);
  report("layer", tokens, context, head_dim, diff);
}

}  // namespace

int main() {
  std::mt19937 gen(1234);
  const int64_t rows[] = {1, 2, 3, 5, 7, 8, 9, 13, 24, 40};
  const int64_t sizes[][2] = {{1, 1}, {7, 5}, {16, 64}, {33, 72}, {256, 704}, {300, 17}};
  for (int64_t m : rows)
    for (const auto& kn : sizes) gemm_case(gen, m, kn[0], kn[1]);
  for (int64_t tokens : {1, 3, 9})
    for (int64_t context : {0, 6, 29})
      for (int64_t head_dim : {8, 10, 64}) layer_case(gen, tokens, context, head_dim);
  return 0;
}
