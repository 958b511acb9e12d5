// bench_cuda MODEL [--prompt N] [--tokens N] [--loops L] [--reps R]
//
// Speed of the CUDA forward (engine/src/forward/cuda_forward.cpp) on one model, as one JSON line:
// prefill tok/s of an N-token prompt (cuBLAS for 64-row chunks and the batch-invariant kernel),
// cuBLAS alone on the same products (the prefill target's yardstick), decode tok/s with the
// graph-captured step and with direct launches, the fast step (CudaFastPath::all: fused kernels,
// split attention, PDL, pinned logits) graph-captured, each of the graph runs again reading the
// logits after every step (the engine's host pipeline), the weight bytes one decode token reads
// and the effective bandwidth that makes, the captured steps' nodes (launches and copies per
// token), device memory held.
// Used by kernels/cuda/check_on_gpu.sh until `tinyloop bench --backend cuda` runs on the GPU;
// not a test (speed is never asserted).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_shape.h"
#include "forward/cuda_forward.h"
#include "kernels/cuda/cuda_kernels.h"
#include "tinyloop/tinyloop.h"

namespace {

double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int arg_int(int argc, char** argv, const char* name, int def) {
    for (int i = 2; i + 1 < argc; ++i)
        if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
    return def;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: bench_cuda MODEL [--prompt N] [--tokens N] [--loops L] [--reps R]\n");
        return 2;
    }
    namespace kc = tinyloop::kern::cuda;
    try {
        const kc::DeviceProbe p = kc::probe_device();
        if (!p.usable) {
            std::fprintf(stderr, "bench_cuda: no usable CUDA device (%s)\n", p.reason.c_str());
            return 3;
        }
        tinyloop::LoadOptions lo;
        lo.backend = tinyloop::Backend::Cpu;
        lo.threads = 1;
        lo.prefill_chunk = 64;
        tinyloop::Model* m = tinyloop::load_model(argv[1], lo);
        const tinyloop::HParams hp = tinyloop::model_hparams(m);
        const tinyloop::ModelInfo info = tinyloop::model_info(m);
        const int L = arg_int(argc, argv, "--loops", hp.default_loops);
        const int reps = std::max(1, arg_int(argc, argv, "--reps", 3));
        const int asked_prompt = arg_int(argc, argv, "--prompt", 2048);
        const int asked_tokens = arg_int(argc, argv, "--tokens", 256);
        // a context shorter than prompt + tokens shortens the prompt, not the decode (the
        // first H200 run: kjv's 512 left 1 token and negative rates)
        const tltest::BenchShape shape = tltest::bench_shape(asked_prompt, asked_tokens, hp.max_seq_len);
        const int n_prompt = shape.prompt, n_tok = shape.tokens;
        std::string note;
        if (shape.prompt_shrunk)
            note = "prompt " + std::to_string(asked_prompt) + " shrunk to " + std::to_string(n_prompt) +
                   ": the model's context is " + std::to_string(hp.max_seq_len);
        if (shape.tokens_cut) note += "; tokens cut to " + std::to_string(n_tok);
        if (n_tok <= tltest::kBenchUntimedTokens)
            note += std::string(note.empty() ? "" : "; ") + "no decode step timed (tokens <= 2): decode rates 0";
        std::vector<int32_t> prompt(n_prompt);
        for (int i = 0; i < n_prompt; ++i) prompt[i] = (i * 131 + 7) % 256;

        tinyloop::CudaWeights w(*m, p.device);

        // prefill (best of reps), both product paths
        double best_gemm = 1e30, best_kernel = 1e30;
        for (int r = 0; r < reps; ++r) {
            for (int gemm_min : {64, 1 << 30}) {
                tinyloop::CudaSessionOptions o;
                o.loops = L;
                o.capacity = n_prompt + n_tok;
                o.gemm_min_tokens = gemm_min;
                tinyloop::CudaSession s(w, o);
                const double t0 = now();
                s.prefill(prompt.data(), n_prompt);
                const double dt = now() - t0;
                double& best = gemm_min == 64 ? best_gemm : best_kernel;
                best = std::min(best, dt);
            }
        }

        // cuBLAS alone on the prefill's products (64-row chunks, every matrix of every layer)
        double best_blas = 1e30;
        {
            kc::Context ctx(p.device);
            const int R = 64;
            size_t maxc = 0, maxr = 0, scratch = 0;
            std::vector<tinyloop::kern::WeightView> mats;
            for (const auto* set : {&w.pre, &w.loop})
                for (const auto& l : *set)
                    for (const auto* W : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) mats.push_back(*W);
            for (const auto& W : mats) {
                maxc = std::max<size_t>(maxc, W.cols);
                maxr = std::max<size_t>(maxr, W.rows);
                scratch = std::max(scratch, kc::gemm_scratch_bytes(W));
            }
            kc::DeviceBuffer x(ctx, R * maxc * 4), y(ctx, R * maxr * 4), s(ctx, scratch);
            ctx.memset(x.get(), 0, x.size());
            const int chunks = (n_prompt + R - 1) / R;
            for (int r = 0; r < reps; ++r) {
                ctx.synchronize();
                const double t0 = now();
                for (int c = 0; c < chunks; ++c) {
                    for (int i = 0; i < static_cast<int>(mats.size()); ++i) {
                        const bool in_loop = i >= hp.n_pre_blocks * 7;  // 7 matrices per block
                        for (int rep = 0; rep < (in_loop ? L : 1); ++rep) kc::gemm(ctx, mats[i], x.f32(), R, y.f32(), s.f32());
                    }
                }
                ctx.synchronize();
                best_blas = std::min(best_blas, now() - t0);
            }
        }

        // decode: the reference step graph-replayed and direct, the fast step (every part,
        // TINYLOOP_CUDA_FAST=1) graph-replayed; then each with the logits read after every
        // step, as the engine's host pipeline does (a download, or the fast step's pinned copy)
        // and the persistent step (every part + persist: one cooperative kernel for the fused
        // launches; two blocks per multiprocessor) with and without the weight rows prefetched
        // into L1 before each grid barrier
        struct Run {
            bool graph, fast, logits;
            int persist_prefetch = -1;  // -1: no persist
            double tok_s = 0;
            size_t nodes = 0;
        };
        Run runs[] = {{true, false, false}, {false, false, false}, {true, true, false}, {true, false, true}, {true, true, true},
                      {true, true, false, 1},  {true, true, false, 0}};
        size_t session_bytes = 0;
        for (Run& r : runs) {
            tinyloop::CudaSessionOptions o;
            o.loops = L;
            o.capacity = n_prompt + n_tok;
            o.use_graph = r.graph;
            if (r.fast) o.fast = tinyloop::CudaFastPath::all();
            if (r.persist_prefetch >= 0) {
                o.fast.persist = true;
                setenv("TINYLOOP_CUDA_PERSIST_PREFETCH", std::to_string(r.persist_prefetch).c_str(), 1);
            }
            tinyloop::CudaSession s(w, o);
            if (!r.fast) session_bytes = s.device_bytes();
            int32_t t = s.prefill(prompt.data(), n_prompt);
            t = s.decode(t);  // captures the graph
            r.nodes = s.step_nodes();
            const int n = n_tok - tltest::kBenchUntimedTokens;
            std::vector<float> z;
            const double t0 = now();
            for (int i = 0; i < n; ++i) {
                t = s.decode(t);
                if (r.logits) z = s.last_logits();
            }
            r.tok_s = tltest::bench_rate(n, now() - t0);
        }
        unsetenv("TINYLOOP_CUDA_PERSIST_PREFETCH");
        const double dec_graph = runs[0].tok_s, dec_direct = runs[1].tok_s, dec_fast = runs[2].tok_s;
        // the persistent kernel's grid barrier alone (empty phases), one and two blocks per SM
        double barrier_us[2] = {0, 0};
        {
            kc::Context bctx(p.device);
            kc::set_persist(bctx, true);
            barrier_us[0] = kc::persist_barrier_probe(bctx, 1, 50);
            barrier_us[1] = kc::persist_barrier_probe(bctx, 2, 50);
        }
        // the barrier a step run by one thread-block cluster would pay (8: the portable size,
        // 16: the largest); -1 where the device refuses the cluster (the reason on stderr)
        double cluster_us[2] = {-1, -1};
        for (int i = 0; i < 2; ++i) {
            try {
                kc::Context cctx(p.device);
                cluster_us[i] = kc::cluster_barrier_probe(cctx, i == 0 ? 8 : 16, 50);
            } catch (const kc::CudaError& e) {
                std::fprintf(stderr, "bench_cuda: cluster barrier probe: %s\n", e.what());
            }
        }

        // bytes one decode token reads: every matrix of the pre blocks once, the loop block L
        // times, the head, one embedding row
        double per_token = 0;
        for (const auto& t : info.tensors) {
            if (t.name.rfind("pre.", 0) == 0) per_token += t.bytes;
            else if (t.name.rfind("loop.", 0) == 0) per_token += double(t.bytes) * L;
            else if (t.name == "head" || (t.name == "embed" && hp.tie_embeddings)) per_token += t.bytes;
            else if (t.name == "embed") per_token += double(t.bytes) / hp.vocab_size;
        }
        // the captured steps' nodes: kernels and copies per token
        const size_t launches = runs[0].nodes, fast_launches = runs[2].nodes;

        std::printf(
            "{\"model\":\"%s\",\"device\":\"%s\",\"loops\":%d,\"prompt\":%d,\"tokens\":%d,\"note\":\"%s\","
            "\"prefill_tok_s\":%.1f,\"prefill_kernel_tok_s\":%.1f,\"cublas_only_tok_s\":%.1f,"
            "\"prefill_vs_cublas\":%.3f,\"decode_graph_tok_s\":%.1f,\"decode_direct_tok_s\":%.1f,"
            "\"bytes_per_token\":%.0f,\"decode_gb_s\":%.1f,\"launches_per_token\":%zu,"
            "\"decode_fast_tok_s\":%.1f,\"fast_gb_s\":%.1f,\"fast_launches_per_token\":%zu,"
            "\"decode_logits_tok_s\":%.1f,\"decode_fast_logits_tok_s\":%.1f,"
            "\"decode_persist_tok_s\":%.1f,\"decode_persist_nopf_tok_s\":%.1f,\"persist_launches_per_token\":%zu,"
            "\"barrier_us_1sm\":%.2f,\"barrier_us_2sm\":%.2f,\"cluster_barrier_us_8\":%.2f,\"cluster_barrier_us_16\":%.2f,"
            "\"weights_device_bytes\":%zu,\"session_device_bytes\":%zu}\n",
            argv[1], kc::describe(p).c_str(), L, n_prompt, n_tok, note.c_str(), n_prompt / best_gemm, n_prompt / best_kernel,
            n_prompt / best_blas, best_blas / best_gemm, dec_graph, dec_direct, per_token, per_token * dec_graph / 1e9,
            launches, dec_fast, per_token * dec_fast / 1e9, fast_launches, runs[3].tok_s, runs[4].tok_s,
            runs[5].tok_s, runs[6].tok_s, runs[5].nodes, barrier_us[0], barrier_us[1], cluster_us[0], cluster_us[1], w.device_bytes(), session_bytes);
        tinyloop::free_model(m);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_cuda: %s\n", e.what());
        return 1;
    }
}
