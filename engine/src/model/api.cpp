// Model information and the tokenizer entry points of the public header (loading, which
// chooses the back end, is forward/load_model.cpp).
#include <algorithm>
#include <thread>

#include "model/loader.h"
#include "model/model.h"
#include "text/utf8.h"

namespace tinyloop {

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
