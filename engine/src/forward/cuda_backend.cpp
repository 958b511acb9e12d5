// Back-end selection (LoadOptions.backend) and the device probe's report.
//
// State of the CUDA back end (issue 6): the kernels (kernels/cuda/) and a whole-model CUDA
// forward with greedy decode (cuda_forward.cpp) exist, but generation, scoring and the
// speculative modes do not yet dispatch to it. Until they do, a usable device is reported and
// `cuda` is refused with NotSupported, `auto` runs on the CPU and says so: nothing claims to
// run on the GPU while it runs on the CPU.
#include "forward/cuda_backend.h"

namespace tinyloop {

#ifdef TINYLOOP_HAVE_CUDA

namespace {

// Probed once per process: on a GPU machine the first CUDA call creates a context (tenths of a
// second), and the answer does not change while the process runs.
const kern::cuda::DeviceProbe& cached_probe() {
    static const kern::cuda::DeviceProbe p = [] {
        try {
            return kern::cuda::probe_device();
        } catch (const std::exception& e) {
            kern::cuda::DeviceProbe q;
            q.reason = std::string("probe failed: ") + e.what();
            return q;
        }
    }();
    return p;
}

}  // namespace

bool cuda_built() { return true; }

std::string cuda_device_summary() { return kern::cuda::describe(cached_probe()); }

BackendChoice choose_backend(Backend requested) {
    BackendChoice c;
    if (requested == Backend::Cpu) {
        c.note = "cpu: requested";
        return c;
    }
    const kern::cuda::DeviceProbe& p = cached_probe();
    if (!p.usable) {
        if (requested == Backend::Cuda)
            throw Error(ErrorCode::Backend, "backend cuda: no usable CUDA device (" + p.reason +
                                                "); use backend cpu or auto");
        c.note = "auto: no usable CUDA device (" + p.reason + "), using the CPU";
        return c;
    }
    // A device is there, but the engine's forward does not dispatch to it yet (see above).
    if (requested == Backend::Cuda)
        throw Error(ErrorCode::NotSupported, "backend cuda: " + kern::cuda::describe(p) +
                                                 " is usable, but the engine does not run on the CUDA "
                                                 "back end yet (issue 6); use backend cpu or auto");
    c.note = "auto: CUDA device " + kern::cuda::describe(p) +
             " found, but the engine does not run on it yet, using the CPU";
    return c;
}

#else

bool cuda_built() { return false; }

std::string cuda_device_summary() { return "no CUDA back end in this build"; }

BackendChoice choose_backend(Backend requested) {
    BackendChoice c;
    switch (requested) {
        case Backend::Cuda:
            throw Error(ErrorCode::NotSupported,
                        "backend cuda: this build has no CUDA back end; use backend cpu or auto");
        case Backend::Auto:
            c.note = "auto: no CUDA back end in this build, using the CPU";
            break;
        case Backend::Cpu:
            c.note = "cpu: requested";
            break;
    }
    return c;
}

#endif

}  // namespace tinyloop
