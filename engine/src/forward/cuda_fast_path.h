// The CUDA session's fast decode step, part by part (CudaSessionOptions::fast, cuda_forward.h),
// and the environment switch that sets it for the calls the engine makes (generate, score):
//
//   TINYLOOP_CUDA_FAST unset, "" or "0"   the reference step (8 launches per layer), the default
//   TINYLOOP_CUDA_FAST=1 (or "all")       every part below
//   TINYLOOP_CUDA_FAST=fuse,split,...     the parts named (comma-separated):
//     fuse    RMSNorm folded into its product, q/k/v + RoPE + KV store in one launch, SwiGLU
//             and the residual adds in the products' epilogues (the reference's bits)
//     split   flash-decoding attention over >= 128 blocks, then a combine launch (float
//             rounding differs from the reference: another summation order)
//     pdl     programmatic dependent launch of the fast kernels (sm_90+, ignored before)
//     pinned  the step's logits copied to pinned host memory inside the captured graph, so
//             reading them after a step costs no second download and sync
//     persist the fused launches of a step recorded as phases of one cooperative kernel, a
//             grid barrier between them (kernels/cuda/phases.cuh; the same bits as without;
//             needs fuse to have anything to record; not part of "all" until measured)
//   "all,persist" (or any list naming all): every part above and persist
//
// Plain C++ (no CUDA): the host tests check the parsing in every build.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string>

#include "tinyloop/tinyloop.h"

namespace tinyloop {

struct CudaFastPath {
    bool fuse = false;
    bool split_attention = false;
    bool pdl = false;
    bool pinned_logits = false;
    bool persist = false;
    bool any() const { return fuse || split_attention || pdl || pinned_logits || persist; }
    bool operator==(const CudaFastPath& o) const {
        return fuse == o.fuse && split_attention == o.split_attention && pdl == o.pdl &&
               pinned_logits == o.pinned_logits && persist == o.persist;
    }
    bool operator!=(const CudaFastPath& o) const { return !(*this == o); }
    static CudaFastPath all() { return CudaFastPath{true, true, true, true, false}; }
    static CudaFastPath persistent() { return CudaFastPath{true, true, true, true, true}; }
};

// "0" / "" / "1" / "all" / a comma list of all, fuse, split, pdl, pinned, persist. Throws
// Error(InvalidArgument) naming the variable, the part and the allowed values.
inline CudaFastPath parse_cuda_fast(const std::string& v) {
    if (v.empty() || v == "0") return {};
    if (v == "1" || v == "all") return CudaFastPath::all();
    CudaFastPath f;
    size_t at = 0;
    while (at <= v.size()) {
        const size_t end = std::min(v.find(',', at), v.size());
        const std::string part = v.substr(at, end - at);
        if (part == "all") {
            const bool keep = f.persist;
            f = CudaFastPath::all();
            f.persist = keep;
        } else if (part == "fuse") f.fuse = true;
        else if (part == "split") f.split_attention = true;
        else if (part == "pdl") f.pdl = true;
        else if (part == "pinned") f.pinned_logits = true;
        else if (part == "persist") f.persist = true;
        else
            throw Error(ErrorCode::InvalidArgument,
                        "TINYLOOP_CUDA_FAST: '" + part + "' in '" + v +
                            "' is not a part; use 0, 1, all, or a comma list of all, fuse, split, pdl, pinned, persist");
        at = end + 1;
    }
    return f;
}

// The switch as the environment sets it now.
inline CudaFastPath cuda_fast_from_env() {
    const char* v = std::getenv("TINYLOOP_CUDA_FAST");
    return parse_cuda_fast(v ? v : "");
}

// One line for a report: "reference" or "fuse+split+pdl+pinned".
inline std::string describe(const CudaFastPath& f) {
    if (!f.any()) return "reference";
    std::string s;
    auto add = [&](bool on, const char* n) {
        if (!on) return;
        if (!s.empty()) s += "+";
        s += n;
    };
    add(f.fuse, "fuse");
    add(f.split_attention, "split");
    add(f.pdl, "pdl");
    add(f.pinned_logits, "pinned");
    add(f.persist, "persist");
    return s;
}

}  // namespace tinyloop
