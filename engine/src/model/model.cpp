// The loaded model's owned memory and tensor lookup (model.h).
#include "model/model.h"
#include "tinyloop/mode_rules.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

namespace tinyloop {

AlignedBuffer::AlignedBuffer(size_t n) {
    // aligned_alloc wants a size that is a multiple of the alignment; the tail is zeroed so a
    // vector load past the last byte reads defined memory.
    constexpr size_t kAlign = 64;
    if (n > SIZE_MAX - kAlign)
        throw Error(ErrorCode::OutOfMemory, "cannot allocate " + std::to_string(n) + " bytes");
    const size_t rounded = n == 0 ? kAlign : (n + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, rounded);
    if (!p) throw Error(ErrorCode::OutOfMemory, "cannot allocate " + std::to_string(n) + " bytes");
    std::memset(static_cast<uint8_t*>(p) + n, 0, rounded - n);
    ptr_ = static_cast<uint8_t*>(p);
    size_ = n;
}

AlignedBuffer::~AlignedBuffer() { std::free(ptr_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : ptr_(other.ptr_), size_(other.size_) {
    other.ptr_ = nullptr;
    other.size_ = 0;
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
    if (this != &other) {
        std::free(ptr_);
        ptr_ = other.ptr_;
        size_ = other.size_;
        other.ptr_ = nullptr;
        other.size_ = 0;
    }
    return *this;
}

int resolve_loops(const HParams& hp, int loops) {
    if (loops < 0 || loops > hp.max_loops)
        throw Error(ErrorCode::InvalidArgument, "loops: " + std::to_string(loops) + " is outside [1, " +
                                                    std::to_string(hp.max_loops) + "] (0 = default)");
    return loops > 0 ? loops : hp.default_loops;
}

int resolve_loops(const Model& m, int loops) { return resolve_loops(m.hp, loops); }


const kern::WeightView* Model::find_tensor(const std::string& name) const {
    for (const auto& [n, view] : views)
        if (n == name) return &view;
    return nullptr;
}

}  // namespace tinyloop
