// Choosing the back end at load (LoadOptions.backend) and turning CUDA failures into
// tinyloop::Error. The only engine file pair that knows whether CUDA was built in; it includes
// kernels/cuda/cuda_kernels.h (no CUDA header) and only when TINYLOOP_HAVE_CUDA is defined.
#pragma once

#include <string>

#include "tinyloop/tinyloop.h"

#ifdef TINYLOOP_HAVE_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace tinyloop {

struct BackendChoice {
    bool cuda = false;   // true: run on device `device`
    int device = -1;
    std::string note;    // why, for model_info().backend_note and `tinyloop info`
};

// auto: CUDA when a usable device exists and the engine can run on it, else the CPU, saying
// why ("auto: no usable CUDA device (cudaGetDeviceCount: cudaErrorInsufficientDriver (...)),
// using the CPU"). cpu: always the CPU. cuda: the device, or Error(Backend) naming the reason
// (Error(NotSupported) in a build without the CUDA back end).
BackendChoice choose_backend(Backend requested);

// Whether this build contains the CUDA back end (TINYLOOP_CUDA found nvcc).
bool cuda_built();

// The device probe in one line: "NVIDIA H200 (device 0, sm_90, ...)" or "no usable CUDA
// device (reason)" or "no CUDA back end in this build". Never throws.
std::string cuda_device_summary();

// Runs fn and rethrows a kern::cuda::CudaError as Error(OutOfMemory) when the device ran out of
// memory, else Error(Backend), with `what` in front of the message.
template <class F>
auto with_cuda_errors(const char* what, F&& fn) -> decltype(fn()) {
#ifdef TINYLOOP_HAVE_CUDA
    try {
        return fn();
    } catch (const kern::cuda::CudaError& e) {
        if (e.out_of_memory())
            throw Error(ErrorCode::OutOfMemory, std::string(what) + ": out of device memory: " + e.what());
        throw Error(ErrorCode::Backend, std::string(what) + ": CUDA: " + e.what());
    }
#else
    (void)what;
    return fn();
#endif
}

}  // namespace tinyloop
