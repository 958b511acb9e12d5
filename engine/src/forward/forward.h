// The one forward implementation (FORMAT.md §1), written against the back-end interface
// (backend.h): block_forward and run_layers are the model's math, once, for every back end; the
// CPU's forward / forward_batch and the CUDA session (cuda_forward.cpp) call them.
#pragma once

#include <functional>
#include <vector>

#include "forward/backend.h"
#include "forward/kv_cache.h"
#include "model/model.h"

namespace tinyloop {

// The cache side of a block, per back end: where a layer's keys and values go, and how its
// queries read them (CPU: KVCache rows, paged or INT8; CUDA: the session's device cache).
class LayerCache {
public:
    virtual ~LayerCache() = default;
    // RoPE on q [n, n_heads*hd] and k [n, n_kv_heads*hd] in place, then k and v into the cache.
    virtual void rope_store(int layer, float* q, float* k, const float* v, int n) = 0;
    // out [n, n_heads*hd] = attention of the n queries over their cache rows at `layer`.
    virtual void attend(int layer, const float* q, int n, float* out) = 0;
};

// A block's activations in the back end's memory, each for the rows of one call.
struct BlockScratch {
    float *a, *q, *k, *v, *att, *o, *g, *u;
    float* cat = nullptr;  // [n, 2d]: the adapter's input [h; e] (loop_input adapter, §1b)
};

// A block kind as data (FORMAT.md §1b): where block_forward puts the second norm of each
// branch. A new kind is an entry here plus the ops it needs on each back end.
//   None:   pre-norm (§1): x += branch(N(x))
//   Branch: x += N'(branch(N(x)))     (sandwich_branch, Ouro)
//   Sum:    x = N'(x + branch(N(x)))  (sandwich_sum, Huginn)
enum class PostNorm { None, Branch, Sum };
struct BlockDesc {
    PostNorm post = PostNorm::None;
};
const BlockDesc& block_desc(BlockKind kind);

// One block over n rows of x (in place) at execution layer `layer` (FORMAT.md §1, §1b):
//   a = rmsnorm(x); q,k,v = W a (+ bq, bk); rope + cache; att = attention; x ⊕= wo att;
//   a = rmsnorm(x); x ⊕= w_down (silu(w_gate a) * (w_up a)), ⊕ per block_desc(hp.block).
void block_forward(BackendOps& be, const HParams& hp, const LayerWeights& w, LayerCache& cache, int layer,
                   const BlockScratch& s, float* x, int n);

// The model's layers in the back end's memory (the CPU's Model, the device copy on CUDA).
struct LayerStack {
    const kern::WeightView* embed = nullptr;
    const std::vector<LayerWeights>* pre = nullptr;
    const std::vector<LayerWeights>* loop = nullptr;
    // §1b (empty / null when the model does not use them):
    const std::vector<LayerWeights>* coda = nullptr;
    const kern::WeightView* adapter = nullptr;
    const float* final_norm = nullptr;  // read by pass_norm and the coda's input norm
};

// The rows' walk through the layers: with start_pass <= 1 the embedding of ids into x (times
// embed_scale), the prelude, its output kept in e (input injection §1a, adapter §1b) and, for
// the adapter, x = s0 (the rows' initial state, [n, d] in the back end's memory); else x (and e)
// already hold the state after pass start_pass - 1. Then passes max(1, start_pass) .. loops:
// each enters through begin_pass, runs the loop layers, ends with end_pass and calls
// after_pass(pass) when set. With readout and coda blocks, x then becomes the coda's output
// (x = coda(RMSNorm(h_L, final_norm)), before the head's norm, §1b).
struct PassPlan {
    int start_pass = 1;
    int loops = 1;
    const std::function<void(int pass)>* after_pass = nullptr;
    const float* s0 = nullptr;  // loop_input adapter: the initial state of the n rows
    bool readout = false;       // run the coda after the last pass (models with n_coda_blocks > 0)
    // Continuous batching: pass p runs rows [0, pass_rows[p]) only (the rows of the sequences at
    // least p deep, a prefix of the n; indices 1..loops). Null: every pass runs all n rows.
    const int* pass_rows = nullptr;
};
// A pass's entry and exit (§1a, §1b): begin_pass feeds e in (add: x += e for pass > 1;
// adapter: x = adapter · [x; e] every pass); end_pass applies pass_norm (x = RMSNorm(x, final_norm)).
void begin_pass(BackendOps& be, const HParams& hp, const LayerStack& w, const BlockScratch& s, float* x,
                const float* e, int n, int pass);
void end_pass(BackendOps& be, const HParams& hp, const LayerStack& w, const BlockScratch& s, float* x, int n);
// The head over n rows of x into out [n, vocab] (compute_logits on every back end): the final norm
// into a ([n, d] scratch), then the head; without the norm where pass_norm already normed the
// state and no coda follows (readout_norms, FORMAT.md §1b).
void head_logits(BackendOps& be, const HParams& hp, const kern::WeightView& head, const float* final_norm,
                 const float* x, int n, float* a, float* out);
// Early exit's state propagation (FORMAT.md §1) at loop layer l: the keys (+ bk with qk_bias,
// then RoPE at pos[0]) and values of the one row x into k, v [n_kv_heads * head_dim]; a is [d]
// scratch. Every back end's propagation computes them so, then stores them in its own cache.
void propagated_kv(BackendOps& be, const HParams& hp, const LayerWeights& l, const float* x, const int* pos, float* a,
                   float* k, float* v);
// Pass `pass` over n rows in place: begin_pass, the loop layers (execution layers
// loop_layer_index(hp, pass, 0) ..), end_pass. Every back end's pass is this.
void loop_pass(BackendOps& be, const HParams& hp, const LayerStack& w, LayerCache& cache, const BlockScratch& s,
               float* x, const float* e, int n, int pass);
// The coda readout of §1b over n rows in place: x = coda(RMSNorm(x, final_norm)), coda block j at
// execution layer n_pre_blocks + j.
void run_coda(BackendOps& be, const HParams& hp, const LayerStack& w, LayerCache& cache, const BlockScratch& s,
              float* x, int n);
void run_layers(BackendOps& be, const HParams& hp, const LayerStack& w, LayerCache& cache, const BlockScratch& s,
                const int32_t* ids, float* x, float* e, int n, const PassPlan& plan);

// Scratch memory for up to `max_tok` rows at once; owned by one call.
struct Workspace {
    int max_tok = 0;
    std::vector<float> h, a, q, k, v, att, o, g, u;
    std::vector<float> e;  // input injection (FORMAT.md §1a): the rows' prelude output e
    std::vector<float> cat, s0;  // loop_input adapter (§1b): [n, 2d] adapter input, [n, d] initial state
    std::vector<int> pos, kv_begin, kv_end;
    std::vector<int> row;  // cache row each token's keys/values go to (== pos except in trees)
    // Tree attention: per-token extra rows after the range (empty offsets = none).
    std::vector<int> extra_rows, extra_offsets;
    // Batched rows (forward_batch): the cache each row's keys/values go to and are read from
    // (empty: every row uses the call's cache).
    std::vector<KVCache*> row_kv;
    // Paged attention: the storage rows each query attends (offsets per query), and zeros.
    std::vector<int> pg_rows, pg_offsets, pg_zero;
    void reserve(const HParams& hp, int n_tok);
};

// Called after every loop pass with the state h_l of the rows just computed: rows
// row0 .. row0+n-1 of the request ([n, d]); a prefill calls it once per chunk and pass.
using PassHook = std::function<void(int pass, int row0, const float* h, int n)>;

struct ForwardArgs {
    const int32_t* tokens = nullptr;  // n ids, already validated
    int n = 0;
    int pos0 = 0;          // absolute position (and cache row) of tokens[0]
    int loops = 1;         // 1..max_loops; the cache must have n_pre + loops*n_loop layers
    int window = 0;        // cache_window: 0 = attend to every earlier position
    const PassHook* on_pass = nullptr;
    // Depth upgrade (FORMAT.md §1): with start_pass = s > 1 the rows start from h_in = h_{s-1}
    // ([n, d], e.g. kept from an earlier call at depth s-1) and only passes s..loops run; the
    // cache must already hold the keys/values of every earlier layer for all positions.
    int start_pass = 1;
    const float* h_in = nullptr;
    // Input injection (FORMAT.md §1a, loop_input "add"; ignored otherwise): a depth upgrade also
    // needs the rows' prelude output e_in ([n, d]); out_e, when set, receives it ([n, d], sized by
    // the caller) from a call that runs the prelude, so that a later call can resume.
    const float* e_in = nullptr;
    float* out_e = nullptr;
    // Per-pass readouts (FORMAT.md §1b): called after every pass with the rows' readout input r_l,
    // what compute_logits reads (h_l without a coda; with one the coda's output over the rows'
    // pass-l states, reading earlier positions' stored coda keys/values and this call's rows'
    // pass-l ones). With a coda every pass then runs the coda over every row of the call (pass by
    // pass over the chunks), the last one at `loops`, so the cache keeps the depth-`loops` coda.
    const PassHook* on_readout = nullptr;
    // With a coda out_h holds the readout input r_L; out_state, when set, receives the rows'
    // state h_L ([n, d], sized by the caller) from which a later call can resume. Without a coda
    // it receives a copy of out_h.
    float* out_state = nullptr;
};

// Runs the tokens through the model at depth `loops`, writing their keys/values into `kv`, and
// leaves the final hidden states h_L in `out_h` ([n, d], before the final norm; with a coda the
// coda's output r_L, which compute_logits reads the same way). Tokens are
// processed in chunks of the model's prefill_chunk; results are identical for any chunking.
void forward(const Model& m, KVCache& kv, Workspace& ws, const ForwardArgs& args,
             std::vector<float>& out_h);

// Several sequences' rows through the model in one pass per layer (continuous batching): the
// matmuls see all rows at once, attention reads each row's own cache. seqs must be sorted by
// loops, deepest first (pass l runs the rows of the sequences with loops >= l, a prefix).
// out_h receives the rows' final states in order ([sum n, d]). Each cache must hold positions
// pos0 .. pos0+n-1 (paged caches: pages taken). Bit for bit what forward() gives each alone.
struct BatchSeq {
    KVCache* kv = nullptr;
    const int32_t* tokens = nullptr;
    int n = 0;
    int pos0 = 0;
    int loops = 1;
    int window = 0;
};
void forward_batch(const Model& m, const BatchSeq* seqs, int n_seqs, Workspace& ws, std::vector<float>& out_h);

// A hook that keeps, per pass, the state of the last row seen ([passes, d] in `states`, which
// must be sized by the caller): after a forward it holds the last position's state per pass.
PassHook last_row_hook(std::vector<float>& states, int d);

// The CPU's pieces of run_layers for paths that stop between passes (early exit, tree
// speculation), rows and attention as already set in ws: run_prelude embeds ids into x (times
// embed_scale), runs the prelude, keeps e (when injects_input; e sized [n, d]) and, for the
// adapter, sets x = s0 at the rows' positions; run_pass runs pass `pass` (begin_pass, the loop
// layers, end_pass) over x.
void run_prelude(const Model& m, KVCache& kv, Workspace& ws, const int32_t* ids, int n, float* x, float* e);
void run_pass(const Model& m, KVCache& kv, Workspace& ws, int pass, float* x, const float* e, int n);
// Early exit's state propagation (FORMAT.md §1; the CPU executor's ExecRow::propagate): writes the
// keys/values of loop layers for passes e+1 .. loops at position `pos` from the frozen state h_e
// (one row); with input injection (§1a/§1b) from h_e as those passes take it in, `input` the
// position's prelude output ([d]; unused, may be null, without injection).
void propagate_exited_state(const Model& m, KVCache& kv, Workspace& ws, const float* h_e, const float* input, int pos,
                            int e, int loops);

// One sweep of a wavefront (pipelined self-speculation, speculation/pipelined.cpp): n rows at
// consecutive positions pos0.., row t running the one pass pass[t] (pass[] >= 1, non-increasing
// in t). The loop block's weights are read once for all of them while each row stores and attends
// its own pass's keys and values. Rows at pass 1 start from tokens[t] (embedding, prelude; their
// prelude outputs into e); the others from their state after their previous pass in x (and e).
// x, e: [n, d], x in place (e unused without input injection). The cache must be one sequence's,
// exact per pass (not paged, kv_sharing per-pass). The rows' readouts are not run here.
struct WaveRows {
    const int32_t* tokens = nullptr;
    const int* pass = nullptr;
    int n = 0;
    int pos0 = 0;
    int window = 0;
    float* x = nullptr;
    float* e = nullptr;
};
void forward_wave(const Model& m, KVCache& kv, Workspace& ws, const WaveRows& r);

// The readout input of §1b for n rows whose positions and attention are set in ws (set_rows, or
// a tree's rows): h itself without a coda; with one r = coda(RMSNorm(h, final_norm)) in `buf`
// ([n, d]), the rows' coda keys and values written into kv (the last coda run of a row is what
// later positions read: run it last at the row's exit depth).
const float* readout_rows(const Model& m, KVCache& kv, Workspace& ws, const float* h, int n, std::vector<float>& buf);

// Sets the rows' positions and attention ranges in ws for tokens at pos0 .. pos0+n-1.
void set_rows(Workspace& ws, int pos0, int n, int window);

// logits[t] = head · RMSNorm(h[t], final_norm) for n rows; logits is [n, vocab].
void compute_logits(const Model& m, const float* h, int n, float* logits, Workspace& ws);

// Whether the model feeds the prelude output e into its passes (§1a "add", §1b "adapter"):
// then a state kept for resuming keeps e per position too.
inline bool injects_input(const HParams& hp) { return hp.loop_input != LoopInput::None; }
// Input injection at the start of pass `pass` on the CPU (begin_pass): x += e over n rows (add,
// pass > 1), x = adapter · [x; e] (adapter, every pass; uses ws.cat); nothing otherwise (e may
// then be null).
void inject_input(const Model& m, int pass, float* x, const float* e, int n, Workspace& ws);

// The initial state s0 (§1b state_init) of the rows at positions pos[0..n) into out ([n, d]):
// zeros, or the seeded truncated normal of hp.state_init (a per-call seed is a copy of hp with
// another state_init.seed).
void initial_state(const HParams& hp, const int* pos, int n, float* out);

// Number of execution layers a cache for depth `loops` holds (§1b: prelude, coda, then passes).
inline int exec_layers(const HParams& hp, int loops) {
    return hp.n_pre_blocks + hp.n_coda_blocks + loops * hp.n_loop_layers;
}
// Execution layer of loop layer j in pass `pass` (1-based).
inline int loop_layer_index(const HParams& hp, int pass, int j) {
    return hp.n_pre_blocks + hp.n_coda_blocks + (pass - 1) * hp.n_loop_layers + j;
}
// Whether compute_logits normalises h before the head: not when pass_norm already did and no
// coda follows (the head reads h_L directly, §1b).
inline bool readout_norms(const HParams& hp) { return !(hp.pass_norm && hp.n_coda_blocks == 0); }

}  // namespace tinyloop
