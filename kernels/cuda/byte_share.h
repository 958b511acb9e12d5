// A holder's share of a shared byte counter (the device bytes a model reports through
// vram_usage_bytes): hold(n) moves the counter by the difference from what this share held,
// so a holder whose buffers grow or shrink after it was counted (a session's forward_rows
// buffers, a cuBLAS handle created on first use) always takes back exactly what it added, and
// the unsigned counter never wraps. Plain C++ (no CUDA): tested on the host.
#pragma once

#include <atomic>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace tinyloop::kern::cuda {

class ByteShare {
public:
    explicit ByteShare(std::atomic<size_t>& total) : total_(&total) {}
    ~ByteShare() { release(); }
    ByteShare(const ByteShare&) = delete;
    ByteShare& operator=(const ByteShare&) = delete;

    // This share now holds n bytes of the total.
    void hold(size_t n) {
        if (n >= held_) {
            total_->fetch_add(n - held_);
        } else {
            const size_t give = held_ - n;
            // Another holder's bytes are never taken back: a counter smaller than this share's
            // part means someone else subtracted ours, a bug the caller must hear about.
            size_t cur = total_->load();
            do {
                if (cur < give)
                    throw std::logic_error("ByteShare: the total (" + std::to_string(cur) + ") is below this share's " +
                                           std::to_string(give) + " bytes being returned");
            } while (!total_->compare_exchange_weak(cur, cur - give));
        }
        held_ = n;
    }
    size_t held() const { return held_; }
    // hold(0) without throwing (destructors): a total already short is left at 0.
    void release() noexcept {
        size_t cur = total_->load();
        while (!total_->compare_exchange_weak(cur, cur >= held_ ? cur - held_ : 0)) {
        }
        held_ = 0;
    }

private:
    std::atomic<size_t>* total_;
    size_t held_ = 0;
};

}  // namespace tinyloop::kern::cuda
