// Lifecycle, model information and the tokenizer entry points of the public header.
#include <algorithm>
#include <thread>

#include "forward/cuda_backend.h"
#include "forward/cuda_forward.h"
#include "model/loader.h"
#include "model/model.h"
#include "text/utf8.h"

namespace tinyloop {

Model* load_model(const std::string& path, const LoadOptions& options) {
    // TINYLOOP_SIMD names a level this CPU lacks (or no level): refuse rather than run another.
    if (const char* refusal = kern::simd_request_error()) throw Error(ErrorCode::InvalidArgument, refusal);
    if (options.threads < 0 || options.threads > 256)
        throw Error(ErrorCode::InvalidArgument,
                    "threads: " + std::to_string(options.threads) + " is outside [0, 256] (0 = all cores)");
    if (options.prefill_chunk < 1 || options.prefill_chunk > 4096)
        throw Error(ErrorCode::InvalidArgument, "prefill_chunk: " + std::to_string(options.prefill_chunk) +
                                                    " is outside [1, 4096]");
    if (options.max_seq_len < 0)
        throw Error(ErrorCode::InvalidArgument,
                    "max_seq_len: " + std::to_string(options.max_seq_len) + " must be >= 0 (0 = the model's)");

    if (options.backend != Backend::Auto && options.backend != Backend::Cpu && options.backend != Backend::Cuda)
        throw Error(ErrorCode::InvalidArgument, "backend: " + std::to_string(static_cast<int>(options.backend)) +
                                                    " is not one of auto, cpu, cuda");
    // cpu | cuda | auto, and why (cuda_backend.cpp); throws for cuda without a usable device.
    const BackendChoice choice = choose_backend(options.backend);

    std::unique_ptr<Model> m = read_model_file(path);
    if (options.max_seq_len > m->hp.max_seq_len)
        throw Error(ErrorCode::InvalidArgument,
                    "max_seq_len: " + std::to_string(options.max_seq_len) + " is outside [1, " +
                        std::to_string(m->hp.max_seq_len) + "] (the model's max_seq_len)");
    m->max_seq_len = options.max_seq_len > 0 ? options.max_seq_len : m->hp.max_seq_len;
    m->prefill_chunk = options.prefill_chunk;
    int threads = options.threads;
    if (threads == 0) threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    m->pool = std::make_unique<kern::ThreadPool>(threads);
    m->backend = "cpu";
    m->backend_note = choice.note + " (" + kern::simd_level() + ", " + std::to_string(threads) + " threads)";
#ifdef TINYLOOP_HAVE_CUDA
    // FORMAT.md §1b: the device session (cuda_forward.cpp) does not carry the version-3 block
    // kinds, adapter, coda or pass norm yet: named, never run with other math.
    HParams math = m->hp;
    math.architecture = "tinyloop";  // the label alone changes no math
    const bool v3_math = hparams_need_v3(math);
    if (choice.cuda && v3_math && options.backend == Backend::Cuda)
        throw Error(ErrorCode::NotSupported, path + ": backend cuda: the file-version-3 architecture (" +
                                                 m->hp.architecture + ", FORMAT.md §1b) does not run on the CUDA "
                                                 "back end yet; use backend cpu or auto");
    if (choice.cuda && v3_math)
        m->backend_note = choice.note + "; the file-version-3 architecture runs on the CPU (" + kern::simd_level() +
                          ", " + std::to_string(threads) + " threads)";
    if (choice.cuda && !v3_math) {
        m->cuda = upload_weights(*m, choice.device);
        m->cuda_required = options.backend == Backend::Cuda;
        m->backend = "cuda";
        m->backend_note = choice.note + (m->cuda_required ? "; generate, generate_stream, score, forward_logits and the lens run on the device, calls "
                                                             "not routed to it yet are refused"
                                                           : "; generate, generate_stream, score, forward_logits and the lens run on the device, the "
                                                             "other calls on the CPU until routed");
    }
#endif
    return m.release();
}

void free_model(Model* model) { delete model; }

size_t vram_usage_bytes(const Model* model) {
    const Model& m = checked(model);
#ifdef TINYLOOP_HAVE_CUDA
    if (m.cuda) return cuda_model_bytes(*m.cuda);
#endif
    (void)m;
    return 0;
}

const HParams& model_hparams(const Model* model) { return checked(model).hp; }

ModelInfo model_info(const Model* model) {
    const Model& m = checked(model);
    ModelInfo info;
    info.path = m.path;
    info.hparams = m.hp;
    info.tokenizer = m.tokenizer_spec;
    info.tokenizer_vocab = m.tokenizer.n_ids();
    info.tensors = m.tensor_infos;
    info.metadata_json = m.metadata_json;
    info.file_bytes = m.file_bytes;
    for (const TensorInfo& t : m.tensor_infos) {
        info.weight_bytes += t.bytes;
        uint64_t n = 1;
        for (int64_t s : t.shape) n *= static_cast<uint64_t>(s);
        info.parameter_count += n;
    }
    info.backend = m.backend;
    info.backend_note = m.backend_note;
    info.threads = m.pool ? m.pool->size() : 1;
    return info;
}

std::vector<float> tensor_as_f32(const Model* model, const std::string& name) {
    const Model& m = checked(model);
    const kern::WeightView* w = m.find_tensor(name);
    if (!w) throw Error(ErrorCode::InvalidArgument, "tensor '" + name + "': no such tensor in the model");
    std::vector<float> out(static_cast<size_t>(w->rows) * w->cols);
    for (int r = 0; r < w->rows; ++r) kern::dequant_row(*w, r, out.data() + static_cast<size_t>(r) * w->cols);
    return out;
}

std::vector<int32_t> tokenize(const Model* model, std::string_view text, bool parse_special) {
    return checked(model).tokenizer.encode(text, parse_special);
}

std::vector<int32_t> stop_token_ids(const Model* model) { return checked(model).tokenizer.stop_ids(); }

static void check_id(const Model& m, int32_t id, size_t index) {
    if (!m.tokenizer.valid_id(id))
        throw Error(ErrorCode::InvalidArgument,
                    "ids[" + std::to_string(index) + "]: token id " + std::to_string(id) +
                        " is outside the tokenizer's ids [0, " + std::to_string(m.tokenizer.n_ids()) + ")");
}

std::string detokenize(const Model* model, const int32_t* ids, size_t n) {
    const Model& m = checked(model);
    if (n > 0 && ids == nullptr) throw Error(ErrorCode::InvalidArgument, "ids: must not be null when n > 0");
    std::string out;
    for (size_t i = 0; i < n; ++i) {
        check_id(m, ids[i], i);
        out += m.tokenizer.bytes_of(ids[i]);
    }
    return out;
}

std::string detokenize_text(const Model* model, const int32_t* ids, size_t n) {
    return sanitize_utf8(detokenize(model, ids, n));
}

std::string token_bytes(const Model* model, int32_t id) {
    const Model& m = checked(model);
    check_id(m, id, 0);
    return m.tokenizer.bytes_of(id);
}

StreamDecoder::StreamDecoder(const Model* model) : model_(&checked(model)) {}

std::string StreamDecoder::push(int32_t id) {
    const Model& m = *model_;
    check_id(m, id, 0);
    pending_ += m.tokenizer.bytes_of(id);
    const size_t complete = utf8_complete_prefix(pending_);
    std::string out = sanitize_utf8(std::string_view(pending_).substr(0, complete));
    pending_.erase(0, complete);
    return out;
}

std::string StreamDecoder::flush() {
    std::string out = sanitize_utf8(pending_);
    pending_.clear();
    return out;
}

}  // namespace tinyloop
