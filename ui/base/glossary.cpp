#include "base/glossary.h"

#include <algorithm>

namespace tlui {

namespace {

QString normalised(QString s) {
    s = s.trimmed().toLower();
    s.replace('_', ' ').replace('-', ' ');
    return s.simplified();
}

// One entry a line group: term, the other spellings the UI uses, the explanation.
const GlossaryEntry kEntries[] = {
    {"acceptance", {"acceptance rate", "accepted", "acc", "accept", "accepted length"},
     "In self-speculation, the share of drafted tokens the verifier agrees with: accepted / tested. "
     "High acceptance means the shallow draft usually guesses what the deep model would have said, "
     "so many tokens come out of one verification."},
    {"agreement map", {"draft agreement map", "draft-agreement map", "first agreeing depth"},
     "For every emitted token, a column; for every depth, a row. A cell is green when the top token "
     "at that depth already equals the top token at the final depth. The red line marks the first "
     "depth that agrees."},
    {"argmax", {"top token", "top guess"},
     "The token with the highest probability. Greedy decoding always emits the argmax."},
    {"argmax_stable", {"argmax stable"},
     "An early-exit criterion: stop once the top token has stayed the same for `patience` passes "
     "in a row."},
    {"bad_words", {"bad words"}, "Token sequences that may never be emitted."},
    {"beam search", {"beam", "beam_size", "beam size", "beams"},
     "Keeps the beam_size most likely partial texts at every step instead of one, and returns the "
     "best full one. Deterministic; slower than greedy, sometimes better text."},
    {"begin_suppress_tokens", {"begin suppress tokens"},
     "Tokens banned only at the first generated position."},
    {"bonus token", {"bonus"},
     "In speculation, the extra token the verifier produces for free at the end of a cycle (after "
     "the last accepted draft, or in place of the first rejected one)."},
    {"cache_window", {"cache window", "sliding window"},
     "Keeps only the last N positions in the KV cache (a sliding window). 0 keeps everything."},
    {"compare decode modes", {"compare", "compare modes"},
     "A view that runs several decode modes on one prompt and lays out their texts, speed, depth, "
     "acceptance and where their texts first differ."},
    {"compute against quality", {"compute vs quality", "compute"},
     "A view that plots how much work each setting does (passes or milliseconds per token) "
     "against how good its predictions are (NLL). Down and to the left is better."},
    {"cycle", {"speculative cycle", "cycles", "verify cycle"},
     "One round of self-speculation: draft draft_ahead tokens at the shallow depth, verify them all "
     "at once at the full depth, keep the agreeing ones."},
    {"decode", {"decoding", "decode rate", "decode tok/s", "decode ms"},
     "Producing the continuation one token at a time, after the prompt has been read (prefill). "
     "Its speed is given in tokens per second."},
    {"depth", {"loop depth", "depth used", "loops", "loops used", "mean depth", "final depth"},
     "How many loop passes the model runs for a token. More depth means more thinking per token "
     "and more time; the bundled model is trained to give its best answer at its default depth."},
    {"depth scrubber", {"scrubber"},
     "A view that answers the same prompt at any depth you choose with a slider, reusing the "
     "passes already computed, and shows what changes from one depth to the next."},
    {"diversity_penalty", {"diversity penalty", "num_beam_groups", "num beam groups", "beam groups"},
     "Group beam search: the beams are split into num_beam_groups groups, and a group is "
     "penalised by diversity_penalty for choosing tokens an earlier group already chose."},
    {"draft", {"drafted", "drafts", "draft depth"},
     "In self-speculation, a guessed token made by running the model at only draft_loops passes."},
    {"draft_ahead", {"draft ahead", "drafted per cycle"},
     "How many tokens the shallow draft guesses in a row before the deep model checks them. More "
     "saves time when the guesses are right and wastes work when they are wrong."},
    {"draft_loops", {"draft loops"},
     "The number of passes the draft uses: the same model, run shallower. Fewer passes draft "
     "faster but are right less often."},
    {"early exit", {"exit", "exited", "exits", "exit depth", "adaptive depth"},
     "Lets each token stop looping as soon as its answer has settled, instead of always running "
     "every pass. Saves time on easy tokens. The criterion, threshold and patience decide what "
     "'settled' means."},
    {"early_exit_criterion", {"criterion", "exit criterion", "early exit criterion"},
     "What early exit watches to decide a token has settled: hidden_l2 (the hidden state stops "
     "changing), logit_margin, kl, entropy_delta, argmax_stable (the top token stops changing), Huginn's "
     "reverse_kl and minp_kl, or the exit gate (gate_stop, gate_select)."},
    {"early_exit_logit_margin", {"logit margin", "logit_margin"},
     "An early-exit criterion: stop once the top token leads the second by at least this margin "
     "(in logits)."},
    {"early_exit_min_L", {"min_L", "min l", "minimum depth"},
     "The first pass at which early exit may stop a token; before it every token keeps looping."},
    {"early_exit_patience", {"patience"},
     "How many passes in a row the criterion must hold before a token exits. 0 switches early "
     "exit off."},
    {"early_exit_peek_every", {"peek every", "peek_every", "probe"},
     "How often (every how many passes) early exit looks at the token after min_L."},
    {"early_exit_threshold", {"threshold", "exit threshold"},
     "The value the early-exit criterion is compared with: e.g. for hidden_l2, a token settles when "
     "its hidden state changes by less than this fraction from one pass to the next."},
    {"early_stopping", {"early stopping"},
     "Beam search only: when to end. true stops as soon as beam_size texts are finished; false uses "
     "a heuristic; never keeps searching until nothing can improve."},
    {"entropy", {"entropy (nats)"},
     "How spread out the model's guess is, in nats: 0 when it is sure of one token, large when "
     "many tokens are about equally likely."},
    {"entropy_delta", {"entropy delta"},
     "An early-exit criterion: stop once the entropy changes by less than the threshold from one "
     "pass to the next."},
    {"EOS", {"end of sequence", "end-of-sequence", "<|endoftext|>", "eos token"},
     "The special token a model emits to say the text is finished."},
    {"epsilon_cutoff", {"epsilon cutoff"},
     "Sampling: drop every token whose probability is below this fixed value."},
    {"eta_cutoff", {"eta cutoff"},
     "Sampling: drop tokens below a cutoff that adapts to the entropy of the guess (eta sampling)."},
    {"exit calibration", {"early-exit calibration", "calibration"},
     "A view that shows, token by token, where each early-exit criterion would stop and which "
     "tokens stopping there would change."},
    {"exponential_decay_length_penalty", {"exponential decay length penalty"},
     "After a given length, raises the chance of the end token more and more, so long texts end."},
    {"execution layer", {"execution layers", "layer"},
     "One (pass, layer) of the model as it runs: the prelude's layers, then the shared layers once per "
     "loop pass. Each has its own keys and values in the KV cache."},
    {"nats", {"nat"},
     "The unit of entropy, KL and NLL when natural logarithms are used: 1 nat is about 1.44 bits."},
    {"position", {"positions", "emitted position"},
     "Where a token sits in the text, counting from 0 at the start of the prompt."},
    {"input injection", {"loop_input", "loop input"},
     "A variant of the looped model (the digit-sum reasoner) that adds the prelude's output back into "
     "the state before every pass, so no pass forgets the input."},
    {"d_model", {"hidden size", "width"}, "How many numbers the hidden state of one position holds."},
    {"vocab_size", {"vocabulary", "vocab"}, "How many different tokens the model knows."},
    {"max_seq_len", {"context length", "context"},
     "The longest text (prompt plus output, in tokens) the model can handle."},
    {"max_loops", {"default_loops", "default loops", "default depth"},
     "default_loops: the depth the model was trained to answer at and runs when loops is 0; "
     "max_loops: the deepest it may be run."},
    {"n_loop_layers", {"shared block", "loop layers"},
     "How many layers the shared block has: the layers every loop pass runs again with the same weights."},
    {"tokenizer", {"merges", "special tokens"},
     "Turns text into tokens and back: bytes merged into common pieces, plus special tokens such as EOS."},
    {"back end", {"backend", "cpu", "cuda"},
     "Where the arithmetic runs: the processor (CPU) or a graphics card (CUDA)."},
    {"baseline", {},
     "In Compare decode modes, the run every other mode's text is compared with; the first token where "
     "they differ is highlighted."},
    {"f32", {"float32"}, "Weights or cache stored as 32-bit floating-point numbers: exact, largest."},
    {"first token", {"first token ms", "time to first token"},
     "The time from pressing Generate until the first new token appears: mostly the prefill."},
    {"force_words_ids", {"force words", "constrained beam"},
     "Beam search that must include the given token sequences somewhere in its answer."},
    {"forced_eos_token_id", {"forced eos token id"},
     "The token forced at the last position allowed by max_tokens, so the text always ends."},
    {"frequency_penalty", {"frequency penalty"},
     "Lowers a token's score by this amount times the number of times it was already emitted."},
    {"exit probability", {"λ", "lambda", "cumulative exit probability", "exit gate curve", "gate curve", "threshold q"},
     "What a learned exit gate (Ouro) says after each pass t: λ_t, the probability that the token "
     "should stop at this pass if it has not stopped before. The cumulative exit probability "
     "1 - (1 - λ_1)...(1 - λ_t) grows pass by pass; the gate criteria stop the token at the first "
     "pass where it reaches the threshold q. The depth plot draws both for the hovered token."},
    {"gate_select", {"gate select", "gate-select"},
     "An early-exit criterion for models with a learned exit gate (Ouro), as Hugging Face's code "
     "runs it: every pass is computed, and the token is read at the first pass whose cumulative "
     "exit probability reaches the threshold. Saves no time; shows what the gate would pick."},
    {"gate_stop", {"gate", "exit gate", "gate stop"},
     "An early-exit criterion for models with a learned exit gate (Ouro): after each pass the gate "
     "gives an exit probability; the token stops looping at the first pass where the cumulative "
     "probability 1 - (1 - p1)(1 - p2)... reaches the threshold."},
    {"grammar", {"gbnf"},
     "A set of rules (a .gbnf file) the output must follow; tokens that would break them are "
     "never chosen."},
    {"greedy", {"greedy decoding"},
     "Always emit the most likely token (the argmax). Deterministic: the same prompt gives the "
     "same text. The reference every other mode is compared with."},
    {"hidden state", {"state", "hidden"},
     "The vector of numbers the model keeps for each position; every pass rewrites it a little. "
     "The logit lens reads it as a guess of the next token."},
    {"hidden_l2", {"hidden l2", "l2"},
     "An early-exit criterion: how much the hidden state changed in the last pass, as a fraction "
     "of its size. A token exits when this stays below the threshold for `patience` passes."},
    {"ignore_eos", {"ignore eos"}, "Keep going after the model's end token."},
    {"int8 KV", {"int8", "int8 kv cache", "kv_cache int8"},
     "A KV cache stored as one byte per number plus a scale: about 3.6 times less memory, results "
     "very close to f32."},
    {"KL", {"KL divergence", "KL to the final depth", "KL(A || B)", "kl to final"},
     "Kullback-Leibler divergence, in nats: how different two probability guesses are. 0 means "
     "identical. Here mostly: how far a shallow pass's guess is from the final pass's guess."},
    {"KV cache", {"kv", "keys and values", "keys/values", "kv_cache", "kv cache", "KV bytes"},
     "The keys and values the model computed for earlier positions, kept so each new token does "
     "not recompute them. A looped model keeps one set per pass and layer."},
    {"kv_sharing", {"kv sharing", "KV sharing", "per-pass", "last-pass", "latest-m4", "compress"},
     "How a looped model keeps keys and values across its passes. per-pass (exact, the default) "
     "keeps one set per pass and layer; last-pass keeps only the last pass's (Ouro's decode-time "
     "reuse); latest-m4 and compress-s{k} are Huginn's ways of sharing slots between passes. The "
     "shared ways use less memory and change the output a little: the model panel and the KV "
     "view show the bytes per token and the measured change in NLL."},
    {"KV provenance", {"provenance"},
     "A view that shows which pass computed each position's keys and values: a normal pass, "
     "propagated from an early exit, or taken from a prefix cache."},
    {"length_penalty", {"length penalty"},
     "Beam search only: ranks finished texts by score / length^length_penalty. Above 1 favours "
     "longer texts, below 1 shorter ones."},
    {"lens row", {"lens tooltip"},
     "For one token, the logit lens at every depth: the top guesses and their probabilities."},
    {"logit", {"logits"},
     "The raw score the model gives each token before they are turned into probabilities."},
    {"logit lens", {"lens", "lens heatmap"},
     "Reads the model's guess of the next token after every loop pass, not only after the last. "
     "It shows how the answer forms: which pass first finds it and whether later passes change it."},
    {"logit_bias", {"logit bias"}, "Adds a fixed amount to chosen tokens' scores before choosing."},
    {"loop pass", {"pass", "passes", "loop"},
     "One run of the shared block of layers. A looped model reuses the same weights pass after "
     "pass; each pass refines the hidden state."},
    {"max_time", {"max time"}, "Stops the run after this many seconds."},
    {"max_tokens", {"max tokens"}, "The most tokens a run may emit (the prompt not counted)."},
    {"min_length", {"min length"},
     "The end token is banned until prompt plus output hold this many tokens."},
    {"min_new_tokens", {"min new tokens"}, "The end token is banned until this many tokens are emitted."},
    {"min_p", {"min p", "min-p"},
     "Sampling: drop tokens whose probability is below min_p times the top token's probability."},
    {"minp_kl", {"minp kl", "min-p kl"},
     "An early-exit criterion from Huginn: KL between the last two passes' distributions after a "
     "min-p filter (tokens under a tenth of the top probability flattened). Exit when it is small."},
    {"no_repeat_ngram_size", {"no repeat ngram size"},
     "Bans any token that would repeat a run of n tokens already in the text."},
    {"NLL", {"negative log-likelihood", "mean NLL", "log-prob", "log prob"},
     "Negative log-likelihood, in nats: how surprised the model is by the real next token. Lower "
     "is better; 0 means it was certain and right."},
    {"num_return_sequences", {"num return sequences", "return sequences"},
     "How many different answers one run returns (sampling or beam)."},
    {"perplexity", {"ppl"}, "e to the mean NLL: roughly how many tokens the model hesitates between."},
    {"predicted vs measured acceptance", {"predicted acceptance", "measured acceptance", "predicted", "measured", "replayed"},
     "Predicted: the share of positions where the draft depth's top token already equals the final "
     "depth's, each position judged alone with the right text before it. Measured: accepted / "
     "tested in a real speculative run. Measured is lower because a cycle stops at its first wrong "
     "draft (the drafts after it are built on a wrong token and count as tested but rejected), and "
     "the draft reads keys and values from shallow passes. 'Replayed' runs the chain rule on the "
     "map: close to measured means the chain rule explains the gap."},
    {"pipelined speculation", {"speculative (pipelined)", "pipelined", "wavefront"},
     "Self-speculation pipelined over depth: while a token runs its deeper passes, the next token "
     "drafted from its shallow pass already starts, and every token in flight is computed in the "
     "same sweep of the shared block's weights. A token whose draft was right costs draft_loops "
     "sweeps instead of the full depth; a wrong one starts over. The text is plain greedy's (sampling: "
     "plain sampling's, drafts tested as in speculative decoding)."},
    {"prefill", {"prompt processing"},
     "Reading the whole prompt in one go before the first new token. Measured in milliseconds."},
    {"prefix cache", {"prefix", "cached prefix"},
     "Keeps the keys and values of a prompt start seen before, so a new prompt with the same start "
     "skips that part of the prefill."},
    {"prelude", {"pre blocks", "n_pre_blocks", "prelude blocks"},
     "The ordinary (not looped) layers that run once before the loop starts."},
    {"presence_penalty", {"presence penalty"},
     "Lowers the score of every token already emitted by this amount, once."},
    {"probability", {"p", "probability of the emitted token", "probability of the final token", "prob"},
     "How likely the model thinks a token is, from 0 to 1. 'Of the emitted token': of the token "
     "that was finally chosen. 'Of the final token': of the token the last pass ranks first."},
    {"prompt", {}, "The text you give the model; it writes the continuation."},
    {"propagated keys/values", {"propagated", "state propagation", "propagated kv"},
     "When a token exits early, later tokens still need its keys and values at the passes it "
     "skipped. They are computed once from its frozen state and reused for every deeper pass, "
     "so the cache stays exact."},
    {"q8/q4", {"q8", "q4", "q2", "quantization", "quantized", "dtype"},
     "Weights stored with 8, 4 or 2 bits per number (plus a scale per group) instead of 32: "
     "smaller and usually faster, slightly less accurate."},
    {"quantization across depth", {"quant"},
     "A view that compares two files of one model (e.g. f32 and q4) pass by pass: how different "
     "their guesses are at every depth."},
    {"renormalize_logits", {"renormalize logits"},
     "Beam search only: turn the scores back into probabilities after the penalties."},
    {"repetition_penalty", {"repetition penalty"},
     "Makes tokens already in the text less likely (divides their score). 1 switches it off."},
    {"reverse_kl", {"reverse kl"},
     "An early-exit criterion from Huginn: KL from the previous pass's distribution to this one's "
     "(kl measures the other direction). Exit when it stays below the threshold."},
    {"sample_seed", {"seed"},
     "Starts the random choices of sampling: the same seed gives the same text again."},
    {"sampling", {"sample", "sampled"},
     "Choose the next token at random, weighted by its probability (after temperature, top-k, "
     "top-p, min-p). Gives varied text."},
    {"self-speculation", {"speculation", "speculative", "speculative decoding", "self-speculative",
                          "speculative (chain)", "chain"},
     "The same model drafts a few tokens cheaply at few passes, then checks them all at once at "
     "full depth and keeps those it agrees with. At temperature 0 the text is exactly greedy's, "
     "only faster when acceptance is high."},
    {"speculation sweep", {"sweep", "speculation tuning sweep"},
     "A view that tries every draft_loops x draft_ahead pair on a few prompts and shows the "
     "speedup and acceptance of each."},
    {"speedup", {"x greedy", "speed up"},
     "How many times faster than plain greedy decoding at full depth, measured on the same prompt."},
    {"step mode", {"step"},
     "A view that generates one token at a time and lets you pick any candidate instead of the "
     "model's choice."},
    {"stop_sequences", {"stop sequences", "stop ids", "stop sequence"},
     "Token sequences that end the run when they appear."},
    {"stop_strings", {"stop strings", "stop string"}, "Text that ends the run when it appears."},
    {"suppress_tokens", {"suppress tokens"}, "Tokens that are never emitted."},
    {"temperature", {"temp"},
     "Sharpens (below 1) or flattens (above 1) the probabilities before sampling. 0 means greedy."},
    {"token", {"tokens", "token id", "id"},
     "The unit the model reads and writes: a word, a piece of a word, a character or a byte."},
    {"tokens per second", {"tok/s", "tokens/s", "speed"},
     "How many tokens decoding produces each second."},
    {"top-k", {"top_k", "top k"}, "Sampling: keep only the k most likely tokens."},
    {"top-p", {"top_p", "top p", "nucleus"},
     "Sampling: keep the most likely tokens until their probabilities add up to p."},
    {"tree width", {"K_branches", "branches", "tree", "speculative (tree)", "tree speculation", "K"},
     "Tree speculation keeps several candidate tokens (branches) at each drafted position instead of "
     "one, and spends its draft steps where the verifier is likeliest to agree: along the first "
     "choices while they keep winning, on a second choice where the first is doubtful. The tree "
     "width is how many candidates each drafted token keeps; the work per cycle stays the chain's."},
    {"typical_p", {"typical p", "typical sampling"},
     "Sampling: keep the tokens whose surprise is closest to the average surprise, up to total "
     "probability p."},
    {"verify_loops", {"verify loops", "verify depth", "verifier", "verify"},
     "The depth at which drafted tokens are checked; the text is the one this depth would write. "
     "0 means the model's default depth."},
};

std::vector<GlossaryEntry> makeEntries() {
    std::vector<GlossaryEntry> e(std::begin(kEntries), std::end(kEntries));
    std::sort(e.begin(), e.end(), [](const GlossaryEntry& a, const GlossaryEntry& b) {
        return a.term.compare(b.term, Qt::CaseInsensitive) < 0;
    });
    return e;
}

}  // namespace

const std::vector<GlossaryEntry>& glossaryEntries() {
    static const std::vector<GlossaryEntry> entries = makeEntries();
    return entries;
}

const GlossaryEntry* findGlossaryEntry(const QString& word) {
    const QString w = normalised(word);
    if (w.isEmpty()) return nullptr;
    for (const GlossaryEntry& e : glossaryEntries()) {
        if (normalised(e.term) == w) return &e;
        for (const QString& a : e.aliases)
            if (normalised(a) == w) return &e;
    }
    return nullptr;
}

std::vector<const GlossaryEntry*> searchGlossary(const QString& query) {
    const QString q = normalised(query);
    std::vector<const GlossaryEntry*> out;
    for (const GlossaryEntry& e : glossaryEntries()) {
        bool hit = q.isEmpty() || normalised(e.term).contains(q) || normalised(e.text).contains(q);
        for (const QString& a : e.aliases) hit = hit || normalised(a).contains(q);
        if (hit) out.push_back(&e);
    }
    return out;
}

}  // namespace tlui
