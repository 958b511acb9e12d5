// This machine's ceilings for `tinyloop bench`: memory read bandwidth and single-precision FMA
// peak, measured in a few hundred milliseconds so that bench can report its tokens/s as a
// fraction of what the hardware allows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tinyloop::cli {

struct MachinePeak {
    double gbs = 0;        // best-of-3 read bandwidth over a large array, GB/s (1e9 bytes)
    double gflops = 0;     // best-of-3 FMA throughput, GFLOP/s (an FMA counts 2)
    std::string isa;       // "avx512", "avx2" or "scalar": the FMA kernel that ran
};

// Read bandwidth with `threads` threads over `bytes` bytes (each thread sums its own slice).
double measure_read_bandwidth_gbs(int threads, size_t bytes = size_t(256) << 20);
// FMA peak with `threads` threads, each running independent accumulator chains.
double measure_fma_gflops(int threads, std::string* isa = nullptr);

// The FMA kernels (bench_fma_*.cpp, each compiled for its ISA): `iters` rounds of every chain;
// return a value that depends on all chains so that nothing is optimised away. Flops per call:
// iters * fma_*_flops_per_iter.
float fma_avx512_kernel(long iters, float a, float b);
float fma_avx2_kernel(long iters, float a, float b);
extern const int fma_avx512_flops_per_iter;
extern const int fma_avx2_flops_per_iter;
// Read kernels for the bandwidth measurement (same files): the sum of n words, n % 32 == 0.
uint64_t read_avx512_kernel(const uint64_t* p, size_t n);
uint64_t read_avx2_kernel(const uint64_t* p, size_t n);

}  // namespace tinyloop::cli
