// What may be issued on a stream while a CUDA graph is being captured (Context::begin_capture
// .. end_capture), as one strict table the real Context enforces and the host tests check.
// CUDA itself refuses a synchronising call during capture only by invalidating the capture
// (cudaErrorStreamCaptureUnsupported at end_capture, far from the cause); an allocation can even
// succeed and leave a graph whose addresses the next replay no longer owns. Here each breach
// throws at the call, naming it. Plain C++ (no CUDA): the host tests drive it without a device.
#pragma once

#include <stdexcept>
#include <string>

namespace tinyloop::kern::cuda {

enum class StreamOp {
    Launch,        // a kernel launch (or cuBLAS call) on the stream: recorded
    Copy,          // device-to-device cudaMemcpyAsync: recorded
    Memset,        // cudaMemsetAsync: recorded
    Stage,         // device-to-pinned cudaMemcpyAsync (stage_ints): recorded
    Alloc,         // cudaMalloc (a DeviceBuffer): not a stream op, its address would be baked in
    Upload,        // host-to-device copy then a stream sync
    Download,      // device-to-host copy then a stream sync
    Sync,          // cudaStreamSynchronize
    CublasCreate,  // cublasCreate allocates device memory and syncs
    GraphLaunch,   // replaying a graph on the stream being captured
};

inline const char* stream_op_name(StreamOp op) {
    switch (op) {
        case StreamOp::Launch: return "a kernel launch";
        case StreamOp::Copy: return "a device-to-device copy";
        case StreamOp::Memset: return "a memset";
        case StreamOp::Stage: return "stage_ints";
        case StreamOp::Alloc: return "a device allocation (DeviceBuffer)";
        case StreamOp::Upload: return "an upload (host to device, synchronising)";
        case StreamOp::Download: return "a download (device to host, synchronising)";
        case StreamOp::Sync: return "a stream synchronisation";
        case StreamOp::CublasCreate: return "creating the cuBLAS handle";
        case StreamOp::GraphLaunch: return "a graph launch";
    }
    return "an unknown stream op";
}

// Whether `op` may be recorded into a graph under capture.
constexpr bool capturable(StreamOp op) {
    return op == StreamOp::Launch || op == StreamOp::Copy || op == StreamOp::Memset || op == StreamOp::Stage;
}

// A context's capture state. The error type is the caller's (CudaError in kernels/cuda).
template <class Error>
class CaptureRules {
public:
    bool capturing() const { return capturing_; }
    void check(StreamOp op) const {
        if (capturing_ && !capturable(op))
            throw Error(std::string("graph capture: ") + stream_op_name(op) +
                            " is not allowed while a decode step is being captured (do it before begin_capture)",
                        false);
    }
    void begin() {
        if (capturing_) throw Error("graph capture: begin_capture while already capturing", false);
        capturing_ = true;
    }
    void end() {
        if (!capturing_) throw Error("graph capture: end_capture without begin_capture", false);
        capturing_ = false;
    }

private:
    bool capturing_ = false;
};

}  // namespace tinyloop::kern::cuda
