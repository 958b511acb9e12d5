// The device the CUDA tests run on, probed once per test program, and the skip every device
// test starts with: "skipped: no CUDA device (<reason>)" where there is none.
#pragma once

#include <gtest/gtest.h>

#include "kernels/cuda/cuda_kernels.h"

namespace tltest {

inline const tinyloop::kern::cuda::DeviceProbe& device_probe() {
    static const tinyloop::kern::cuda::DeviceProbe p = tinyloop::kern::cuda::probe_device();
    return p;
}

}  // namespace tltest

#define TL_REQUIRE_DEVICE()                                                                           \
    do {                                                                                              \
        if (!tltest::device_probe().usable)                                                           \
            GTEST_SKIP() << "skipped: no CUDA device (" << tltest::device_probe().reason << ")";      \
    } while (0)
