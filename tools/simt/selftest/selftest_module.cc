// simt_selftest: the kernels of selftest_kernels.cu on raw host addresses (numpy's
// `a.ctypes.data`); each returns (error name, error string) of its launch.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cuda_runtime_api.h>

namespace simt_selftest {
cudaError_t shared_sum(int64_t* out, bool barrier);
cudaError_t divergent_barrier(int* out);
cudaError_t early_exit(int* out);
cudaError_t reduce_twice(int64_t* out, bool barrier);
cudaError_t reduce_shape(int64_t* out, unsigned threads);
cudaError_t scan(int64_t* out, int64_t* total);
cudaError_t uninitialized_shared(int* out, bool init);
cudaError_t ticket(int* order, int* next, unsigned blocks, unsigned threads);
cudaError_t vote(const int* flags, int* out);
cudaError_t fill(float* out, float value, int64_t n, unsigned blocks, unsigned threads,
                 size_t shared);
}  // namespace simt_selftest

namespace py = pybind11;
using namespace simt_selftest;

namespace {
template <typename T>
T* ptr(uintptr_t v) {
  return reinterpret_cast<T*>(v);
}
py::tuple result(cudaError_t err) {
  return py::make_tuple(cudaGetErrorName(err), cudaGetErrorString(err));
}
}  // namespace

PYBIND11_MODULE(simt_selftest, m) {
  m.def("shared_sum",
        [](uintptr_t out, bool barrier) { return result(shared_sum(ptr<int64_t>(out), barrier)); });
  m.def("divergent_barrier",
        [](uintptr_t out) { return result(divergent_barrier(ptr<int>(out))); });
  m.def("early_exit", [](uintptr_t out) { return result(early_exit(ptr<int>(out))); });
  m.def("reduce_twice", [](uintptr_t out, bool barrier) {
    return result(reduce_twice(ptr<int64_t>(out), barrier));
  });
  m.def("reduce_shape", [](uintptr_t out, unsigned threads) {
    return result(reduce_shape(ptr<int64_t>(out), threads));
  });
  m.def("scan", [](uintptr_t out, uintptr_t total) {
    return result(scan(ptr<int64_t>(out), ptr<int64_t>(total)));
  });
  m.def("uninitialized_shared",
        [](uintptr_t out, bool init) { return result(uninitialized_shared(ptr<int>(out), init)); });
  m.def("ticket", [](uintptr_t order, uintptr_t next, unsigned blocks, unsigned threads) {
    return result(ticket(ptr<int>(order), ptr<int>(next), blocks, threads));
  });
  m.def("vote", [](uintptr_t flags, uintptr_t out) {
    return result(vote(ptr<const int>(flags), ptr<int>(out)));
  });
  m.def("fill", [](uintptr_t out, float value, int64_t n, unsigned blocks, unsigned threads,
                   size_t shared) {
    return result(fill(ptr<float>(out), value, n, blocks, threads, shared));
  });
}
