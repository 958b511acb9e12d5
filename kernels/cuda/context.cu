// The device probe, the context (stream, cuBLAS handle, pinned staging), device memory and
// graph capture. Every failure becomes a CudaError; nothing here aborts.
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "kernels/cuda/common.cuh"

#ifndef TL_CUDA_LIBDIR
#define TL_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

namespace tinyloop::kern::cuda {

namespace {

std::atomic<size_t> g_bytes_in_use{0};
// Held around every cudaMalloc/cudaFree here and around the cudaMemGetInfo measurement of
// cublasCreate, so that the measurement sees no allocation of ours from another thread.
std::mutex g_alloc_mutex;

std::string err_text(cudaError_t e) {
    return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

__global__ void probe_kernel(int* out) { *out = 42; }

}  // namespace

void throw_cuda(cudaError_t e, const char* what, const char* file, int line) {
    (void)cudaGetLastError();  // clear a non-sticky error so the next check starts clean
    const char* base = file;
    for (const char* p = file; *p; ++p)
        if (*p == '/') base = p + 1;
    throw CudaError(std::string(what) + ": " + err_text(e) + " [" + base + ":" + std::to_string(line) + "]",
                    e == cudaErrorMemoryAllocation);
}

void throw_cublas(cublasStatus_t s, const char* what, const char* file, int line) {
    const char* base = file;
    for (const char* p = file; *p; ++p)
        if (*p == '/') base = p + 1;
    const Cublas& b = cublas();
    throw CudaError(std::string(what) + ": " + b.status_name(s) + " (" + b.status_string(s) + ") [" + base + ":" +
                        std::to_string(line) + "]",
                    s == CUBLAS_STATUS_ALLOC_FAILED);
}

const Cublas& cublas() {
    static Cublas lib;
    static std::string error;
    static std::once_flag once;
    std::call_once(once, [] {
        // $TINYLOOP_CUBLAS, the loader's search path, the toolkit this was built with.
        const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
        std::string tried;
        void* h = nullptr;
        const char* env = std::getenv("TINYLOOP_CUBLAS");
        for (const std::string& c : {std::string(env ? env : ""), name, std::string(TL_CUDA_LIBDIR) + "/" + name,
                                     std::string("/usr/local/cuda/lib64/") + name}) {
            if (c.empty() || h) continue;
            h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (!h) {
                const char* e = dlerror();
                tried += (tried.empty() ? "" : "; ") + std::string(e ? e : c.c_str());
            }
        }
        if (!h) {
            error = "cannot open " + name + " (cuBLAS, part of the CUDA toolkit; set TINYLOOP_CUBLAS to its path): " + tried;
            return;
        }
        auto sym = [&](const char* n) {
            void* p = dlsym(h, n);
            if (!p && error.empty()) error = std::string("cuBLAS has no symbol ") + n;
            return p;
        };
        lib.create = reinterpret_cast<decltype(lib.create)>(sym("cublasCreate_v2"));
        lib.destroy = reinterpret_cast<decltype(lib.destroy)>(sym("cublasDestroy_v2"));
        lib.set_stream = reinterpret_cast<decltype(lib.set_stream)>(sym("cublasSetStream_v2"));
        lib.set_workspace = reinterpret_cast<decltype(lib.set_workspace)>(sym("cublasSetWorkspace_v2"));
        lib.gemm_ex = reinterpret_cast<decltype(lib.gemm_ex)>(sym("cublasGemmEx"));
        lib.status_name = reinterpret_cast<decltype(lib.status_name)>(sym("cublasGetStatusName"));
        lib.status_string = reinterpret_cast<decltype(lib.status_string)>(sym("cublasGetStatusString"));
    });
    if (!error.empty()) throw CudaError(error, false);
    return lib;
}

DeviceProbe probe_device() {
    DeviceProbe p;
    cudaRuntimeGetVersion(&p.runtime_version);
    if (cudaDriverGetVersion(&p.driver_version) != cudaSuccess) p.driver_version = 0;
    const cudaError_t e = cudaGetDeviceCount(&p.device_count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        p.device_count = 0;
        p.reason = "cudaGetDeviceCount: " + err_text(e);
        return p;
    }
    if (p.device_count == 0) {
        p.reason = "cudaGetDeviceCount: no CUDA device";
        return p;
    }
    std::string why;
    for (int d = 0; d < p.device_count; ++d) {
        cudaDeviceProp prop{};
        cudaError_t pe = cudaGetDeviceProperties(&prop, d);
        if (pe != cudaSuccess) {
            (void)cudaGetLastError();
            why += (why.empty() ? "" : "; ") + std::string("device ") + std::to_string(d) +
                   ": cudaGetDeviceProperties: " + err_text(pe);
            continue;
        }
        // The kernels are built for sm_90 plus compute_75 PTX: a device the binary has no code
        // for shows up as cudaErrorNoKernelImageForDevice on the first launch; try one.
        int* flag = nullptr;
        int host = 0;
        cudaError_t le = cudaSetDevice(d);
        if (le == cudaSuccess) le = cudaMalloc(&flag, sizeof(int));
        if (le == cudaSuccess) {
            probe_kernel<<<1, 1>>>(flag);
            le = cudaGetLastError();
            if (le == cudaSuccess) le = cudaMemcpy(&host, flag, sizeof(int), cudaMemcpyDeviceToHost);
            if (le == cudaSuccess && host != 42) le = cudaErrorUnknown;
        }
        if (flag) cudaFree(flag);
        if (le != cudaSuccess) {
            (void)cudaGetLastError();
            why += (why.empty() ? "" : "; ") + std::string("device ") + std::to_string(d) + " (" + prop.name +
                   ", sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + "): test launch: " +
                   err_text(le);
            continue;
        }
        p.usable = true;
        p.device = d;
        p.name = prop.name;
        p.cc_major = prop.major;
        p.cc_minor = prop.minor;
        p.total_bytes = prop.totalGlobalMem;
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) p.free_bytes = fr;
        (void)cudaGetLastError();
        return p;
    }
    p.reason = why.empty() ? "no usable CUDA device" : why;
    return p;
}

std::string describe(const DeviceProbe& p) {
    if (!p.usable) return "no usable CUDA device (" + p.reason + ")";
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s (device %d, sm_%d%d, %.0f GiB, driver %d.%d, runtime %d.%d)", p.name.c_str(),
                  p.device, p.cc_major, p.cc_minor, static_cast<double>(p.total_bytes) / (1u << 30),
                  p.driver_version / 1000, (p.driver_version % 1000) / 10, p.runtime_version / 1000,
                  (p.runtime_version % 1000) / 10);
    return buf;
}

size_t device_bytes_in_use() { return g_bytes_in_use.load(); }

size_t device_free_bytes(int device) {
    TL_CUDA_CHECK(cudaSetDevice(device));
    size_t free = 0, total = 0;
    TL_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return free;
}

// ---- DeviceBuffer ----------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(Context& ctx, size_t bytes) : bytes_(bytes), device_(ctx.device()) {
    if (bytes == 0) return;
    ctx.impl().rules.check(StreamOp::Alloc);
    TL_CUDA_CHECK(cudaSetDevice(device_));
    std::unique_lock<std::mutex> lock(g_alloc_mutex);
    const cudaError_t e = cudaMalloc(&ptr_, bytes);
    if (e != cudaSuccess) {
        ptr_ = nullptr;
        (void)cudaGetLastError();
        throw CudaError("cudaMalloc of " + std::to_string(bytes) + " bytes: " + err_text(e),
                        e == cudaErrorMemoryAllocation);
    }
    g_bytes_in_use += bytes;
}

DeviceBuffer::~DeviceBuffer() {
    if (ptr_) {
        cudaSetDevice(device_);
        std::lock_guard<std::mutex> lock(g_alloc_mutex);
        cudaFree(ptr_);
        g_bytes_in_use -= bytes_;
    }
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_), device_(o.device_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
        DeviceBuffer old(std::move(*this));
        ptr_ = o.ptr_;
        bytes_ = o.bytes_;
        device_ = o.device_;
        o.ptr_ = nullptr;
        o.bytes_ = 0;
    }
    return *this;
}

// ---- Graph -----------------------------------------------------------------------------------

Graph::Graph() : impl(std::make_unique<Impl>()) {}
Graph::~Graph() {
    if (impl) {
        if (impl->exec) cudaGraphExecDestroy(impl->exec);
        if (impl->graph) cudaGraphDestroy(impl->graph);
    }
}
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&& o) noexcept {
    if (this != &o) {
        Graph old(std::move(*this));
        impl = std::move(o.impl);
    }
    return *this;
}
bool Graph::empty() const { return !impl || !impl->exec; }
size_t Graph::nodes() const {
    if (!impl || !impl->graph) return 0;
    size_t n = 0;
    TL_CUDA_CHECK(cudaGraphGetNodes(impl->graph, nullptr, &n));
    return n;
}

// ---- Context ---------------------------------------------------------------------------------

Context::Context(int device) : impl_(std::make_unique<Impl>()) {
    impl_->device = device;
    TL_CUDA_CHECK(cudaSetDevice(device));
    TL_CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
    const cudaError_t e = cudaMallocHost(reinterpret_cast<void**>(&impl_->pinned), 64 * sizeof(int));
    if (e != cudaSuccess) {
        cudaStreamDestroy(impl_->stream);
        throw_cuda(e, "cudaMallocHost(pinned staging)", __FILE__, __LINE__);
    }
}

cublasHandle_t cublas_handle(Context& ctx) {
    Context::Impl& c = ctx.impl();
    if (!c.phases.pending.empty()) flush_phases(ctx);  // the gemm that follows is stream work
    if (c.cublas) return c.cublas;
    c.rules.check(StreamOp::CublasCreate);
    const Cublas& lib = cublas();
    // Our own workspace (the size cuBLAS's documentation asks for: 32 MiB on Hopper and later,
    // 4 MiB before), so that no gemm allocates behind the count.
    int major = 0;
    TL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, c.device));
    DeviceBuffer ws(ctx, size_t(major >= 9 ? 32 : 4) << 20);
    size_t free0 = 0, free1 = 0, total = 0;
    cublasHandle_t h = nullptr;
    {
        std::lock_guard<std::mutex> lock(g_alloc_mutex);
        TL_CUDA_CHECK(cudaStreamSynchronize(c.stream));
        TL_CUDA_CHECK(cudaMemGetInfo(&free0, &total));
        TL_CUBLAS_CHECK(lib.create(&h));
        const cublasStatus_t s1 = lib.set_stream(h, c.stream);
        const cublasStatus_t s2 = s1 == CUBLAS_STATUS_SUCCESS ? lib.set_workspace(h, ws.get(), ws.size()) : s1;
        const cudaError_t me = cudaMemGetInfo(&free1, &total);
        if (s2 != CUBLAS_STATUS_SUCCESS || me != cudaSuccess) {
            lib.destroy(h);
            if (s2 != CUBLAS_STATUS_SUCCESS) throw_cublas(s2, "cublasSetStream/cublasSetWorkspace", __FILE__, __LINE__);
            throw_cuda(me, "cudaMemGetInfo", __FILE__, __LINE__);
        }
    }
    // What the handle itself took (its default pool, internal state), as the device saw it.
    const size_t handle_bytes = free0 > free1 ? free0 - free1 : 0;
    g_bytes_in_use += handle_bytes;
    c.cublas = h;
    c.cublas_bytes = handle_bytes;
    c.cublas_workspace = std::move(ws);
    return h;
}

size_t Context::device_bytes() const { return impl_->cublas_bytes + impl_->cublas_workspace.size(); }

Context::~Context() {
    cudaSetDevice(impl_->device);
    if (impl_->capturing()) {
        cudaGraph_t g = nullptr;
        cudaStreamEndCapture(impl_->stream, &g);
        if (g) cudaGraphDestroy(g);
    }
    cudaStreamSynchronize(impl_->stream);
    if (impl_->cublas) {
        cublas().destroy(impl_->cublas);
        g_bytes_in_use -= impl_->cublas_bytes;
    }
    impl_->cublas_workspace = DeviceBuffer();
    if (impl_->pinned) cudaFreeHost(impl_->pinned);
    if (impl_->pinned_floats) cudaFreeHost(impl_->pinned_floats);
    if (impl_->phases.barrier) cudaFree(impl_->phases.barrier);
    cudaStreamDestroy(impl_->stream);
    (void)cudaGetLastError();
}

int Context::device() const { return impl_->device; }

int Context::compute_capability() const {
    int major = 0, minor = 0;
    TL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, impl_->device));
    TL_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, impl_->device));
    return major * 10 + minor;
}

void Context::upload(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    impl_->rules.check(StreamOp::Upload);
    TL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_of(*this)));
    TL_CUDA_CHECK(cudaStreamSynchronize(stream_of(*this)));
}

void Context::download(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    impl_->rules.check(StreamOp::Download);
    TL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_of(*this)));
    TL_CUDA_CHECK(cudaStreamSynchronize(stream_of(*this)));
}

void Context::memset(void* dst, int byte, size_t bytes) {
    if (bytes == 0) return;
    TL_CUDA_CHECK(cudaMemsetAsync(dst, byte, bytes, stream_of(*this)));
}

void Context::copy(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    TL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_of(*this)));
}

void Context::stage_ints(const int* src, int n) {
    if (n < 1 || n > 64) throw CudaError("stage_ints: n = " + std::to_string(n) + " is outside [1, 64]", false);
    TL_CUDA_CHECK(cudaMemcpyAsync(impl_->pinned, src, static_cast<size_t>(n) * sizeof(int), cudaMemcpyDeviceToHost,
                                  stream_of(*this)));
}

const int* Context::staged() const { return impl_->pinned; }

void Context::reserve_staged_floats(size_t n) {
    if (n <= impl_->pinned_floats_n) return;
    impl_->rules.check(StreamOp::Alloc);
    float* p = nullptr;
    TL_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&p), n * sizeof(float)));
    if (impl_->pinned_floats) {
        TL_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));  // a copy into the old one may be in flight
        cudaFreeHost(impl_->pinned_floats);
    }
    impl_->pinned_floats = p;
    impl_->pinned_floats_n = n;
}

void Context::stage_floats(const float* src, size_t n) {
    if (n > impl_->pinned_floats_n)
        throw CudaError("stage_floats: " + std::to_string(n) + " floats, the staging holds " +
                            std::to_string(impl_->pinned_floats_n) + " (reserve_staged_floats first)", false);
    impl_->rules.check(StreamOp::Stage);
    if (n == 0) return;
    TL_CUDA_CHECK(cudaMemcpyAsync(impl_->pinned_floats, src, n * sizeof(float), cudaMemcpyDeviceToHost, stream_of(*this)));
}

const float* Context::staged_floats() const { return impl_->pinned_floats; }

void Context::synchronize() {
    impl_->rules.check(StreamOp::Sync);
    TL_CUDA_CHECK(cudaStreamSynchronize(stream_of(*this)));
}

void Context::begin_capture() {
    if (impl_->capturing()) impl_->rules.begin();  // throws: already capturing
    TL_CUDA_CHECK(cudaStreamBeginCapture(impl_->stream, cudaStreamCaptureModeThreadLocal));
    impl_->rules.begin();
}

Graph Context::end_capture() {
    if (impl_->capturing() && !impl_->phases.pending.empty()) flush_phases(*this);  // into the recording
    cudaGraph_t g = nullptr;
    impl_->rules.end();
    TL_CUDA_CHECK(cudaStreamEndCapture(impl_->stream, &g));
    Graph out;
    out.impl->graph = g;
    TL_CUDA_CHECK(cudaGraphInstantiate(&out.impl->exec, g, 0));
    return out;
}

void Context::launch(const Graph& g) {
    impl_->rules.check(StreamOp::GraphLaunch);
    if (g.empty()) throw CudaError("launch: the graph is empty (capture failed or moved from)", false);
    TL_CUDA_CHECK(cudaGraphLaunch(g.impl->exec, stream_of(*this)));
}

}  // namespace tinyloop::kern::cuda
