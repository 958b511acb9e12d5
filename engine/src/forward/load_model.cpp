// load_model: the file read (model/loader.h) and the back end chosen for it (LoadOptions.backend,
// cuda_backend.h), with the weights uploaded when the CUDA executor will run the model; and the
// rest of the model's lifecycle. Here rather than in model/ because choosing a back end is this
// floor's (forward/: the back ends and their executors).
#include <algorithm>
#include <thread>

#include "forward/cuda_backend.h"
#include "forward/cuda_forward.h"
#include "forward/executor.h"
#include "model/loader.h"
#include "model/model.h"

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
    // The back end chosen at load runs every block kind and pass feature of the file
    // (executor.h: model_math_ops, the table of what each back end runs): with backend cuda a
    // feature the device lacks is refused, naming it; auto runs such a model on the CPU.
    bool on_device = false;
    if (choice.cuda) {
        try {
            on_device = choose_executor(true, options.backend == Backend::Cuda, model_math_ops(m->hp)) == ExecKind::Cuda;
        } catch (const Error& e) {
            throw Error(e.code(), path + ": backend cuda: " + e.what());
        }
        if (!on_device) {
            std::string lacking;  // the first of the file's features the device lacks (auto: the CPU runs them all)
            for (ExecOp op : model_math_ops(m->hp))
                if (!exec_supports(ExecKind::Cuda, op)) {
                    lacking = exec_op_name(op);
                    break;
                }
            m->backend_note = choice.note + "; " + lacking + " does not run on the device yet: the model runs on the CPU (" +
                              kern::simd_level() + ", " + std::to_string(threads) + " threads)";
        }
    }
    if (on_device) {
        m->cuda = upload_weights(*m, choice.device);
        m->cuda_required = options.backend == Backend::Cuda;
        m->backend = "cuda";
        m->backend_note = choice.note + (m->cuda_required ? "; generate, generate_stream, score, forward_logits and the lens run on the device, calls "
                                                             "not routed to it yet are refused"
                                                           : "; generate, generate_stream, score, forward_logits and the lens run on the device, the "
                                                             "other calls on the CPU until routed");
        if (m->hp.n_coda_blocks > 0)  // exec_supports_together: the coda after the last pass only
            m->backend_note += std::string("; with its coda blocks, the calls that stop, read out or resume between passes (early "
                                           "exit, speculation, the lens during generate, caches, the batch engine) ") +
                               (m->cuda_required ? "are refused" : "run on the CPU");
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

}  // namespace tinyloop
