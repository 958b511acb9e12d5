// Back-end selection and its fallback (issue 6, "Selection and fallback"): on a machine without
// a usable CUDA device, `auto` runs on the CPU and says why, `cuda` fails with a clear error
// (CLI: exit 2, the reason on stderr); `cpu` is always the CPU. Runs on every machine: the
// expectations follow from the build (CUDA compiled in or not) and the device probe, and the
// device-specific halves report "skipped" where they do not apply.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <sys/wait.h>

#include "forward/cuda_backend.h"
#include "test_util.h"
#include "tinyloop/tinyloop.h"

namespace {

using tinyloop::Backend;
using tinyloop::ErrorCode;

const std::string kModel = std::string(TL_SOURCE_DIR) + "/resources/models/tinyloop-kjv/model-f32.tinyloop";

bool device_usable() {
    return tinyloop::cuda_built() && tinyloop::cuda_device_summary().rfind("no usable", 0) != 0;
}

tinyloop::LoadOptions opts(Backend b) {
    tinyloop::LoadOptions o;
    o.backend = b;
    o.threads = 1;
    return o;
}

struct CliRun {
    int status = -1;
    std::string out;  // stdout and stderr
};
CliRun run_cli(const std::string& args) {
    CliRun r;
    const std::string cmd = std::string("'") + TL_CLI_PATH + "' " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    std::array<char, 4096> buf{};
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
    const int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

TEST(BackendFallback, CpuIsAlwaysTheCpu) {
    tinyloop::ModelHandle m = tinyloop::load_model_handle(kModel, opts(Backend::Cpu));
    const tinyloop::ModelInfo info = tinyloop::model_info(m.get());
    EXPECT_EQ(info.backend, "cpu");
    EXPECT_EQ(info.backend_note.rfind("cpu: requested", 0), 0u) << info.backend_note;
    EXPECT_EQ(tinyloop::vram_usage_bytes(m.get()), 0u);
}

TEST(BackendFallback, AutoWithoutDeviceRunsOnTheCpuAndSaysWhy) {
    if (device_usable()) GTEST_SKIP() << "skipped: a CUDA device is present (" << tinyloop::cuda_device_summary() << ")";
    tinyloop::ModelHandle m = tinyloop::load_model_handle(kModel, opts(Backend::Auto));
    const tinyloop::ModelInfo info = tinyloop::model_info(m.get());
    EXPECT_EQ(info.backend, "cpu");
    const std::string& note = info.backend_note;
    EXPECT_EQ(note.rfind("auto: ", 0), 0u) << note;
    EXPECT_NE(note.find("using the CPU"), std::string::npos) << note;
    if (tinyloop::cuda_built()) {
        // the probe's own reason, e.g. "cudaGetDeviceCount: cudaErrorInsufficientDriver (...)"
        const std::string summary = tinyloop::cuda_device_summary();
        EXPECT_NE(note.find(summary), std::string::npos) << note << "\nprobe: " << summary;
        EXPECT_NE(note.find("no usable CUDA device ("), std::string::npos) << note;
    } else {
        EXPECT_NE(note.find("no CUDA back end in this build"), std::string::npos) << note;
    }
    EXPECT_EQ(tinyloop::vram_usage_bytes(m.get()), 0u);

    // and it generates: the same greedy tokens as an explicit cpu load
    tinyloop::ModelHandle c = tinyloop::load_model_handle(kModel, opts(Backend::Cpu));
    const std::vector<int32_t> prompt = tinyloop::tokenize(m.get(), "In the beginning");
    tinyloop::GenerateConfig g;
    g.max_tokens = 8;
    g.temperature = 0.0f;
    g.ignore_eos = true;
    const auto a = tinyloop::generate(m.get(), prompt.data(), static_cast<int>(prompt.size()), g);
    const auto b = tinyloop::generate(c.get(), prompt.data(), static_cast<int>(prompt.size()), g);
    EXPECT_EQ(a.size(), prompt.size() + 8);  // the prompt, then the continuation
    EXPECT_EQ(a, b);
}

TEST(BackendFallback, CudaWithoutDeviceIsAClearError) {
    if (device_usable()) GTEST_SKIP() << "skipped: a CUDA device is present (" << tinyloop::cuda_device_summary() << ")";
    try {
        tinyloop::ModelHandle m = tinyloop::load_model_handle(kModel, opts(Backend::Cuda));
        FAIL() << "backend cuda loaded without a usable device";
    } catch (const tinyloop::Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.rfind("backend cuda: ", 0), 0u) << msg;
        EXPECT_NE(msg.find("use backend cpu or auto"), std::string::npos) << msg;
        if (tinyloop::cuda_built()) {
            EXPECT_EQ(e.code(), ErrorCode::Backend) << msg;
            EXPECT_NE(msg.find("no usable CUDA device (" ), std::string::npos) << msg;
        } else {
            EXPECT_EQ(e.code(), ErrorCode::NotSupported) << msg;
        }
    }
}

TEST(BackendFallback, CliBackendCudaExitsTwoWithTheReason) {
    if (device_usable()) GTEST_SKIP() << "skipped: a CUDA device is present (" << tinyloop::cuda_device_summary() << ")";
    const CliRun r = run_cli("info '" + kModel + "' --backend cuda");
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find("backend cuda: "), std::string::npos) << r.out;
    if (tinyloop::cuda_built()) {
        EXPECT_NE(r.out.find("no usable CUDA device ("), std::string::npos) << r.out;
    }
    EXPECT_EQ(r.out.find("Segmentation"), std::string::npos) << r.out;

    const CliRun g = run_cli("generate '" + kModel + "' --backend cuda --prompt 'In the' --max-tokens 2");
    EXPECT_EQ(g.status, 2) << g.out;
    EXPECT_NE(g.out.find("backend cuda: "), std::string::npos) << g.out;
}

TEST(BackendFallback, CliAutoPrintsTheReason) {
    if (device_usable()) GTEST_SKIP() << "skipped: a CUDA device is present (" << tinyloop::cuda_device_summary() << ")";
    const CliRun r = run_cli("info '" + kModel + "' --backend auto");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("backend      cpu (auto: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("using the CPU"), std::string::npos) << r.out;
    const CliRun j = run_cli("info '" + kModel + "' --json");
    EXPECT_EQ(j.status, 0) << j.out;
    EXPECT_NE(j.out.find("\"backend_note\":\"auto: "), std::string::npos) << j.out;
}

TEST(BackendFallback, CliRejectsAnUnknownBackend) {
    const CliRun r = run_cli("info '" + kModel + "' --backend gpu");
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_NE(r.out.find("--backend: expected one of cpu, cuda, auto, got 'gpu'"), std::string::npos) << r.out;
}

// On a machine with a device: auto chooses it, and what the probe says is what auto reports.
TEST(BackendFallback, WithDeviceAutoNamesTheDevice) {
    if (!device_usable()) GTEST_SKIP() << "skipped: no CUDA device (" << tinyloop::cuda_device_summary() << ")";
    tinyloop::ModelHandle m = tinyloop::load_model_handle(kModel, opts(Backend::Auto));
    const tinyloop::ModelInfo info = tinyloop::model_info(m.get());
    EXPECT_EQ(info.backend, "cuda");
    EXPECT_NE(info.backend_note.find(tinyloop::cuda_device_summary()), std::string::npos) << info.backend_note;
    EXPECT_GT(tinyloop::vram_usage_bytes(m.get()), 0u);
}

// `tinyloop info --backend cuda` names the device, its memory and the model's device bytes.
TEST(BackendFallback, WithDeviceInfoNamesTheDeviceAndItsMemory) {
    if (!device_usable()) GTEST_SKIP() << "skipped: no CUDA device (" << tinyloop::cuda_device_summary() << ")";
    const CliRun r = run_cli("info '" + kModel + "' --backend cuda");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("backend      cuda"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(tinyloop::cuda_device_summary()), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("on the device"), std::string::npos) << r.out;
}

}  // namespace
