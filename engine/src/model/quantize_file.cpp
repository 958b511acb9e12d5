// tinyloop quantize: re-write a model with its matrices in another dtype.
#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "model/quant.h"

namespace tinyloop {

namespace {

// The values `w` ([rows, cols]) become once stored as `dtype`.
std::vector<float> round_trip(const std::vector<float>& w, int rows, int cols, DType dtype, int group) {
    std::vector<float> out(w.size());
    if (dtype == DType::F32) return w;
    if (dtype == DType::F16) {
        for (size_t i = 0; i < w.size(); ++i) out[i] = kern::f16_to_f32(kern::f32_to_f16(w[i]));
        return out;
    }
    if (dtype == DType::BF16) {
        for (size_t i = 0; i < w.size(); ++i) out[i] = kern::bf16_to_f32(kern::f32_to_bf16(w[i]));
        return out;
    }
    const QuantizedMatrix q = quantize_matrix(w.data(), rows, cols, dtype, group);
    kern::WeightView v;
    v.type = dtype_wtype(dtype);
    v.rows = rows;
    v.cols = cols;
    v.group_size = group;
    v.data = q.codes.data();
    v.scales = q.scales.data();
    v.zeros = q.zeros.data();
    for (int r = 0; r < rows; ++r) kern::dequant_row(v, r, out.data() + static_cast<size_t>(r) * cols);
    return out;
}

}  // namespace

QuantizeReport quantize_model_file(const std::string& in_path, const std::string& out_path, DType dtype,
                                   int group_size) {
    const bool quantized = dtype_is_quantized(dtype);
    if (quantized && group_size != 32 && group_size != 64 && group_size != 128)
        throw Error(ErrorCode::InvalidArgument, "group_size: " + std::to_string(group_size) + " is not one of 32, 64, 128");
    LoadOptions lo;
    lo.backend = Backend::Cpu;
    lo.threads = 1;
    std::unique_ptr<Model, void (*)(Model*)> m(load_model(in_path, lo), free_model);
    const ModelInfo info = model_info(m.get());
    ModelSpec spec;
    spec.hparams = info.hparams;
    spec.tokenizer = info.tokenizer;
    nlohmann::json meta = nlohmann::json::parse(info.metadata_json.empty() ? "{}" : info.metadata_json);
    if (!meta.is_object()) meta = nlohmann::json::object();
    meta["quantization"] = {{"dtype", dtype_name(dtype)},
                            {"group_size", quantized ? group_size : 0},
                            {"source", std::filesystem::path(in_path).filename().string()}};
    spec.metadata_json = meta.dump();

    QuantizeReport rep;
    rep.file_bytes_in = info.file_bytes;
    for (const TensorInfo& t : info.tensors) {
        TensorData td;
        td.name = t.name;
        td.shape = t.shape;
        td.values = tensor_as_f32(m.get(), t.name);
        const bool matrix = t.shape.size() == 2;
        td.dtype = matrix ? dtype : DType::F32;
        td.group_size = group_size;
        QuantizeTensorReport r;
        r.name = t.name;
        r.from = t.dtype;
        r.to = td.dtype;
        r.bytes_in = t.bytes;
        if (matrix) {
            const int rows = static_cast<int>(t.shape[0]), cols = static_cast<int>(t.shape[1]);
            if (quantized && cols % group_size != 0)
                throw Error(ErrorCode::InvalidArgument, "group_size: " + std::to_string(group_size) +
                                                            " does not divide the rows of " + t.name + " (" +
                                                            std::to_string(cols) + " columns)");
            const std::vector<float> back = round_trip(td.values, rows, cols, dtype, group_size);
            double num = 0, den = 0;
            for (size_t i = 0; i < back.size(); ++i) {
                const double e = static_cast<double>(back[i]) - td.values[i];
                num += e * e;
                den += static_cast<double>(td.values[i]) * td.values[i];
            }
            r.rel_error = den > 0 ? std::sqrt(num / den) : 0.0;
            const uint64_t n = static_cast<uint64_t>(rows) * cols;
            r.bytes_out = quantized ? n * dtype_bits(dtype) / 8 + 2 * 2 * n / group_size : n * dtype_bits(dtype) / 8;
        } else {
            r.bytes_out = t.bytes;
        }
        rep.tensors.push_back(r);
        spec.tensors.push_back(std::move(td));
    }
    save_model(out_path, spec);
    rep.file_bytes_out = std::filesystem::file_size(out_path);
    return rep;
}

}  // namespace tinyloop
