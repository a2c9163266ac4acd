// simt_selftest: the kernels of selftest_kernels.cu on raw host addresses (numpy's
// `a.ctypes.data`); each returns (error name, error string) of its launch.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>
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
cudaError_t fill_on(float* out, float value, int64_t n, cudaStream_t stream);
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
cudaStream_t stream_of(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }
// A runtime call's result: (error name, error string), the pending error cleared (as a binding's
// throw_if does) so that it does not leak into the next test.
py::tuple call(cudaError_t err) {
  py::tuple r = result(err);
  cudaGetLastError();
  return r;
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

  // Stream capture (tests/simt): the runtime's calls on integer handles.
  m.def("fill_on", [](uintptr_t out, float value, int64_t n, uintptr_t stream) {
    return call(fill_on(ptr<float>(out), value, n, stream_of(stream)));
  });
  m.def("begin_capture", [](uintptr_t stream) {
    return call(cudaStreamBeginCapture(stream_of(stream), cudaStreamCaptureModeRelaxed));
  });
  m.def("end_capture", [](uintptr_t stream) {
    cudaGraph_t g = nullptr;
    py::tuple r = call(cudaStreamEndCapture(stream_of(stream), &g));
    return py::make_tuple(r[0], r[1], reinterpret_cast<uintptr_t>(g));
  });
  m.def("capture_status", [](uintptr_t stream) {
    cudaStreamCaptureStatus st;
    cudaStreamIsCapturing(stream_of(stream), &st);
    return static_cast<int>(st);
  });
  m.def("instantiate", [](uintptr_t graph) {
    cudaGraphExec_t e = nullptr;
    cudaGraphInstantiate(&e, reinterpret_cast<cudaGraph_t>(graph), 0);
    cudaGraphDestroy(reinterpret_cast<cudaGraph_t>(graph));
    return reinterpret_cast<uintptr_t>(e);
  });
  m.def("graph_nodes", [](uintptr_t graph) {
    size_t n = 0;
    cudaGraph_t g = reinterpret_cast<cudaGraph_t>(graph);
    cudaGraphGetNodes(g, nullptr, &n);
    std::vector<cudaGraphNode_t> nodes(n);
    cudaGraphGetNodes(g, nodes.data(), &n);
    py::list types;
    for (cudaGraphNode_t node : nodes) {
      cudaGraphNodeType t;
      cudaGraphNodeGetType(node, &t);
      types.append(static_cast<int>(t));
    }
    return types;
  });
  m.def("launch", [](uintptr_t exec, uintptr_t stream) {
    return call(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(exec), stream_of(stream)));
  });
  m.def("exec_destroy",
        [](uintptr_t exec) { cudaGraphExecDestroy(reinterpret_cast<cudaGraphExec_t>(exec)); });
  m.def("memset_async", [](uintptr_t p, int value, size_t bytes, uintptr_t stream) {
    return call(cudaMemsetAsync(ptr<void>(p), value, bytes, stream_of(stream)));
  });
  m.def("memcpy_async", [](uintptr_t dst, uintptr_t src, size_t bytes, int kind, uintptr_t stream) {
    return call(cudaMemcpyAsync(ptr<void>(dst), ptr<const void>(src), bytes,
                                static_cast<cudaMemcpyKind>(kind), stream_of(stream)));
  });
  m.def("memcpy", [](uintptr_t dst, uintptr_t src, size_t bytes, int kind) {
    return call(
        cudaMemcpy(ptr<void>(dst), ptr<const void>(src), bytes, static_cast<cudaMemcpyKind>(kind)));
  });
  m.def("stream_sync",
        [](uintptr_t stream) { return call(cudaStreamSynchronize(stream_of(stream))); });
  m.def("device_sync", []() { return call(cudaDeviceSynchronize()); });
  m.def("malloc_free", []() {
    void* p = nullptr;
    py::tuple r = call(cudaMalloc(&p, 16));
    if (p != nullptr) cudaFree(p);
    return r;
  });
  m.def("free_null", []() { return call(cudaFree(nullptr)); });
}
