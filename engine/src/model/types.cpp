// Names of the public enums (tinyloop.h): dtypes, loop inputs and error codes.
#include "tinyloop/tinyloop.h"

namespace tinyloop {

const char* dtype_name(DType t) {
    switch (t) {
        case DType::F32:
            return "f32";
        case DType::F16:
            return "f16";
        case DType::Q8:
            return "q8";
        case DType::Q4:
            return "q4";
        case DType::Q2:
            return "q2";
        case DType::BF16:
            return "bf16";
    }
    return "unknown";
}

DType parse_dtype(const std::string& name) {
    if (name == "f32") return DType::F32;
    if (name == "f16") return DType::F16;
    if (name == "q8") return DType::Q8;
    if (name == "q4") return DType::Q4;
    if (name == "q2") return DType::Q2;
    if (name == "bf16") return DType::BF16;
    throw Error(ErrorCode::InvalidArgument,
                "dtype: '" + name + "' unknown, allowed f32, f16, bf16, q8, q4, q2");
}

const char* loop_input_name(LoopInput v) {
    switch (v) {
        case LoopInput::None:
            return "none";
        case LoopInput::Add:
            return "add";
        case LoopInput::Adapter:
            return "adapter";
    }
    return "unknown";
}

LoopInput parse_loop_input(const std::string& name) {
    if (name == "none") return LoopInput::None;
    if (name == "add") return LoopInput::Add;
    if (name == "adapter") return LoopInput::Adapter;
    throw Error(ErrorCode::InvalidArgument, "loop_input: '" + name + "' unknown, allowed none, add, adapter");
}

const char* block_kind_name(BlockKind v) {
    switch (v) {
        case BlockKind::PreNorm:
            return "pre_norm";
        case BlockKind::SandwichBranch:
            return "sandwich_branch";
        case BlockKind::SandwichSum:
            return "sandwich_sum";
    }
    return "unknown";
}

BlockKind parse_block_kind(const std::string& name) {
    if (name == "pre_norm") return BlockKind::PreNorm;
    if (name == "sandwich_branch") return BlockKind::SandwichBranch;
    if (name == "sandwich_sum") return BlockKind::SandwichSum;
    throw Error(ErrorCode::InvalidArgument,
                "block: '" + name + "' unknown, allowed pre_norm, sandwich_branch, sandwich_sum");
}

bool hparams_need_v3(const HParams& hp) {
    return hp.architecture != "tinyloop" || hp.block != BlockKind::PreNorm || hp.qk_bias || hp.embed_scale != 1.0f ||
           hp.pass_norm || hp.n_coda_blocks != 0 || hp.loop_input == LoopInput::Adapter ||
           hp.state_init.kind != StateInit::Kind::Zeros || hp.exit_gate;
}

const char* error_code_name(ErrorCode code) {
    switch (code) {
        case ErrorCode::InvalidArgument:
            return "InvalidArgument";
        case ErrorCode::BadFile:
            return "BadFile";
        case ErrorCode::Io:
            return "Io";
        case ErrorCode::OutOfMemory:
            return "OutOfMemory";
        case ErrorCode::NotSupported:
            return "NotSupported";
        case ErrorCode::Backend:
            return "Backend";
        case ErrorCode::Internal:
            return "Internal";
    }
    return "Unknown";
}

}  // namespace tinyloop
