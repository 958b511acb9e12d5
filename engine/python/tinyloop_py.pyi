"""Type stub of tinyloop_py, the pybind11 binding of the TinyLoop runtime (engine/python).

Errors: ValueError (invalid argument; the message starts with the field name), ModelFileError
(a ValueError: a file the loader refuses), OSError (cannot read/write), MemoryError,
NotImplementedError (a feature not in this build), EngineError (a RuntimeError: back-end
failure or engine bug). Every call releases the GIL while the engine runs.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal, TypedDict, Union

Prompt = Union[str, bytes, Sequence[int]]
Criterion = Literal["hidden_l2", "logit_margin", "kl", "entropy_delta", "argmax_stable",
                    "l2", "margin", "entropy", "argmax"]


class ModelFileError(ValueError):
    """A model file the loader refuses (FORMAT.md §4)."""


class EngineError(RuntimeError):
    """A back-end (CUDA) failure or a broken engine invariant."""


class LensDepth(TypedDict):
    depth: int
    top_ids: list[int]
    top_probs: list[float]
    p_emitted: float
    entropy: float


class _TokenEventBase(TypedDict):
    token: int
    position: int
    index: int
    piece: str
    depth: int
    prob: float


class TokenEvent(_TokenEventBase, total=False):
    lens: list[LensDepth]          # with lens=True: depths 1..depth
    cycle: int                     # speculative modes
    drafted: list[int]
    accepted: int
    from_verifier: bool


class GenerateStats(TypedDict):
    prefill_ms: float
    first_token_ms: float
    decode_ms: float
    total_ms: float
    prompt_tokens: int
    tokens_emitted: int
    kv_cache_bytes: int            # bytes the call's KV cache held
    stop_reason: Literal["EOS", "STOP_SEQUENCE", "MAX_TOKENS", "CALLBACK_ABORT", "GRAMMAR_DEAD_END", "STOP_STRING",
                         "MAX_TIME"]
    loops_used: int
    depth_per_token: list[int]
    decode_tokens_per_s: float
    spec_cycles: int
    spec_drafted: int
    spec_tested: int
    spec_accepted: int
    spec_accept_hist: list[int]
    draft_ms: float
    verify_ms: float
    spec_acceptance_rate: float
    spec_mean_accepted: float


class _ResultBase(TypedDict):
    tokens: list[int]              # prompt + continuation
    prompt_ids: list[int]
    output_ids: list[int]
    text: str                      # continuation; stop strings excluded; U+FFFD for invalid UTF-8
    stats: GenerateStats


class ReturnedSequence(TypedDict):
    output_ids: list[int]
    text: str
    stop_reason: str
    score: float                   # beam: logp / len^length_penalty; sampling: sum of log-probs


class GenerateResult(_ResultBase, total=False):
    events: list[TokenEvent]       # with events=True or lens=True
    sequences: list[ReturnedSequence]  # num_return_sequences > 1: every output, [0] = output_ids
    reused_tokens: int             # generate_with_pool


class GenerateConfig:
    """Decode settings (the seed's GenerateConfig) with the C++ defaults."""
    max_tokens: int                # 64, >= 0
    loops: int                     # 0 = the model's default_loops; else 1..max_loops
    temperature: float             # 0.0; >= 0; <= 0.01 is greedy
    top_k: int                     # 50; >= 1 when sampling
    top_p: float                   # 1.0; (0, 1]
    min_p: float                   # 0.0; [0, 1]
    cache_window: int              # 0 = unlimited
    repetition_penalty: float      # 1.0; > 0
    frequency_penalty: float       # 0.0; [-2, 2]
    presence_penalty: float        # 0.0; [-2, 2]
    logit_bias: dict[int, float]   # {} ; bias in [-100, 100]; str keys accepted when set
    stop_sequences: list[list[int]]
    stop_strings: list[str]
    stop: list[str]                # alias of stop_strings; accepts str | list[str] | None
    ignore_eos: bool
    max_time: float                # 0.0 seconds = no limit
    no_repeat_ngram_size: int      # 0 disables
    bad_words: list[list[int]]     # token sequences never emitted
    beam_size: int                 # 0; >= 2 beam search
    length_penalty: float          # 1.0; beam only
    early_stopping: bool | str     # False; beam only; True | False | "never" (HF)
    renormalize_logits: bool       # False; beam only
    min_new_tokens: int            # 0; EOS banned until this many tokens are emitted
    min_length: int                # 0; EOS banned until prompt + output hold this many
    forced_eos_token_id: int       # -1 (off); the only token allowed as the last of max_tokens
    exponential_decay_length_penalty: tuple[int, float] | None  # None; (start_index, decay_factor)
    suppress_tokens: list[int]     # token ids never emitted
    begin_suppress_tokens: list[int]  # token ids banned for the first new token
    typical_p: float               # 1.0; sampling only
    epsilon_cutoff: float          # 0.0; sampling only
    eta_cutoff: float              # 0.0; sampling only
    num_return_sequences: int      # 1; beam: <= beam_size; sampling: seeds seed .. seed + N - 1
    num_beam_groups: int           # 1; beam only; divides beam_size
    diversity_penalty: float       # 0.0; [0, 100]; needs num_beam_groups >= 2
    force_words: list[list[int] | list[list[int]]]  # []; beam only; HF's force_words_ids
    early_exit_patience: int       # 0 disables
    early_exit_min_L: int          # 2
    early_exit_peek_every: int     # 1
    early_exit_logit_margin: float # 0.0
    early_exit_criterion: str      # "hidden_l2"
    early_exit_threshold: float    # 0.05
    sample_seed: int               # 0
    seed: int                      # alias of sample_seed
    kv_cache: str                  # "f32" | "int8"
    def __init__(self, **fields: Any) -> None: ...
    def to_dict(self) -> dict[str, Any]: ...


class Model:
    """A loaded .tinyloop model; a context manager. free() releases this object's hold."""
    @property
    def path(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    @property
    def info(self) -> dict[str, Any]: ...
    @property
    def hparams(self) -> dict[str, Any]: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def eos_id(self) -> int: ...
    @property
    def recommendation(self) -> dict[str, Any]: ...  # metadata "recommended": {speculation?, early_exit?}
    def vram_usage_bytes(self) -> int: ...
    def tokenize(self, text: str, parse_special: bool = False) -> list[int]: ...
    def detokenize(self, ids: Sequence[int]) -> str: ...
    def detokenize_bytes(self, ids: Sequence[int]) -> bytes: ...
    def token_bytes(self, id: int) -> bytes: ...
    def free(self) -> None: ...
    def __enter__(self) -> Model: ...
    def __exit__(self, *exc: Any) -> bool: ...
    def generate(self, prompt: Prompt, config: GenerateConfig | None = None, **kw: Any) -> GenerateResult: ...
    def generate_stream(self, prompt: Prompt, config: GenerateConfig | None = None, queue_size: int = 16,
                        **kw: Any) -> GenerationStream: ...
    def generate_batch(self, prompts: Sequence[Prompt], config: GenerateConfig | None = None,
                       **kw: Any) -> list[GenerateResult]: ...
    def score(self, tokens: Prompt, loops: int = 0) -> dict[str, Any]: ...
    def score_last_token(self, tokens: Prompt, loops: int = 0, top_k: int = 10, logits: bool = True) -> dict[str, Any]: ...
    def score_logit_lens(self, tokens: Prompt, loops: int = 0, top_k: int = 5,
                         final_only: bool = False) -> dict[str, Any]: ...
    def score_with_uncertainty(self, tokens: Prompt, loops: int = 0) -> dict[str, Any]: ...
    def score_with_consistency_escalation(self, tokens: Prompt, depths: Sequence[int] = (2, 4, 8),
                                          signal: Literal["entropy", "margin", "disagreement"] = "entropy",
                                          threshold: float = 2.0) -> dict[str, Any]: ...


class GenerationStream(Iterator[TokenEvent]):
    """Events of one decode running on a worker thread; close()/break/GC aborts it."""
    def __iter__(self) -> GenerationStream: ...
    def __next__(self) -> TokenEvent: ...
    def abort(self) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> GenerationStream: ...
    def __exit__(self, *exc: Any) -> bool: ...
    @property
    def finished(self) -> bool: ...
    @property
    def result(self) -> GenerateResult | None: ...
    @property
    def prompt_ids(self) -> list[int]: ...


class BatchStream(Iterator[TokenEvent]):
    """One request of a BatchEngine: its events (no lens rows), then `result`."""
    def __iter__(self) -> BatchStream: ...
    def __next__(self) -> TokenEvent: ...
    def abort(self) -> None: ...
    def close(self) -> None: ...
    def wait(self) -> None: ...
    def __enter__(self) -> BatchStream: ...
    def __exit__(self, *exc: Any) -> bool: ...
    @property
    def finished(self) -> bool: ...
    @property
    def result(self) -> GenerateResult | None: ...
    @property
    def prompt_ids(self) -> list[int]: ...
    @property
    def id(self) -> int: ...


class BatchEngine:
    """Continuous batching: requests from any thread decode together on a driver thread, each
    with exactly the tokens generate() gives it alone; KV pages from a shared pool."""
    def __init__(self, model: Model, kv_pages: int = 2048, page_size: int = 16, max_batch: int = 64,
                 prefill_chunk: int = 64) -> None: ...
    def submit(self, prompt: Prompt, config: GenerateConfig | None = None, queue_size: int = 16,
               **fields: Any) -> BatchStream: ...
    def generate(self, prompt: Prompt, config: GenerateConfig | None = None, **fields: Any) -> GenerateResult: ...
    def stats(self) -> dict[str, int]: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> BatchEngine: ...
    def __exit__(self, *exc: Any) -> bool: ...


class Grammar:
    """A GBNF-style grammar for constrained decoding; pass as grammar= (GBNF text works too)."""
    def __init__(self, text: str) -> None: ...
    @staticmethod
    def from_file(path: str) -> Grammar: ...


class StreamDecoder:
    def __init__(self, model: Model) -> None: ...
    def push(self, id: int) -> str: ...
    def flush(self) -> str: ...


class PrefixCache:
    def __init__(self, model: Model, prefix: Prompt, loops: int = 0, cache_window: int = 0) -> None: ...
    @property
    def length(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def freed(self) -> bool: ...
    def generate(self, prompt: Prompt, config: GenerateConfig | None = None, **kw: Any) -> GenerateResult: ...
    def free(self) -> None: ...
    def __enter__(self) -> PrefixCache: ...
    def __exit__(self, *exc: Any) -> bool: ...


class ResumeHandle:
    def __init__(self, model: Model, prompt: Prompt, loops: int = 0) -> None: ...
    @property
    def loops(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def freed(self) -> bool: ...
    def generate(self, config: GenerateConfig | None = None, **kw: Any) -> GenerateResult: ...
    def free(self) -> None: ...
    def __enter__(self) -> ResumeHandle: ...
    def __exit__(self, *exc: Any) -> bool: ...


class PrefixPool:
    def __init__(self, model: Model, loops: int = 0) -> None: ...
    def add(self, prefix: Prompt) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def freed(self) -> bool: ...
    def generate(self, prompt: Prompt, config: GenerateConfig | None = None, **kw: Any) -> GenerateResult: ...
    def free(self) -> None: ...
    def __enter__(self) -> PrefixPool: ...
    def __exit__(self, *exc: Any) -> bool: ...


def load_model(path: str, backend: Literal["auto", "cpu", "cuda"] = "auto", threads: int = 0,
               max_seq_len: int = 0, prefill_chunk: int = 64) -> Model: ...
def write_random_model(path: str, *, vocab_size: int = 300, d_model: int = 64, n_heads: int = 4,
                       n_kv_heads: int = 0, head_dim: int = 16, d_ff: int = 128, n_pre_blocks: int = 1,
                       n_loop_layers: int = 1, default_loops: int = 3, max_loops: int = 6, max_seq_len: int = 256,
                       seed: int = 1, dtype: Literal["f32", "f16", "q8", "q4", "q2"] = "f32",
                       group_size: int = 32, loop_input: Literal["none", "add"] = "none") -> None: ...
def quantize_model_file(in_path: str, out_path: str, dtype: Literal["f32", "f16", "q8", "q4", "q2"],
                        group_size: int = 32) -> dict[str, Any]: ...

# Keyword arguments of the generate* family: the GenerateConfig fields above, plus
# grammar: Grammar | str | None = None, events: bool = False, lens: bool = False, lens_top_k: int = 5 (1..64).
def generate(model: Model, prompt: Prompt, config: GenerateConfig | None = None, **kw: Any) -> GenerateResult: ...
def generate_stream(model: Model, prompt: Prompt, config: GenerateConfig | None = None, queue_size: int = 16,
                    **kw: Any) -> GenerationStream: ...
def generate_batch(model: Model, prompts: Sequence[Prompt], config: GenerateConfig | None = None,
                   **kw: Any) -> list[GenerateResult]: ...
def validate_config(model: Model, prompt: Prompt | int, config: GenerateConfig | None = None, **kw: Any) -> None: ...
def write_model_metadata(in_path: str, out_path: str, metadata_json: str) -> None: ...
# The engine's resolver of the model's recommended settings: the caller's value, else the model's, else built-in.
def resolve_early_exit(model: Model, **early_exit_fields: Any) -> tuple[dict[str, Any], dict[str, str]]: ...
def resolve_speculation(model: Model, *, mode: str = "chain", loops: int = 0, verify_loops: int = 0,
                        draft_loops: int = 0, draft_ahead: int = 0, branches: int = 0) -> dict[str, int]: ...
# The distribution decoding draws the token after `tokens` from (the last `emitted` count as output).
def next_token_distribution(model: Model, tokens: Prompt, emitted: int = 0, config: GenerateConfig | None = None,
                            **kw: Any) -> list[float]: ...
def generate_speculative(model: Model, prompt: Prompt, *, max_tokens: int = 64, draft_loops: int = 2,
                         verify_loops: int = 8, draft_ahead: int = 4, temperature: float = 0.0, seed: int = 0,
                         top_k: int = 0, top_p: float = 1.0, ignore_eos: bool = False, stream: bool = False,
                         queue_size: int = 16, events: bool = False, lens: bool = False,
                         lens_top_k: int = 5) -> GenerateResult | GenerationStream: ...
def generate_tree_speculative(model: Model, prompt: Prompt, *, max_tokens: int = 64, draft_loops: int = 2,
                              verify_loops: int = 8, draft_ahead: int = 4, K_branches: int = 2,
                              temperature: float = 0.0, seed: int = 0, ignore_eos: bool = False,
                              stream: bool = False, queue_size: int = 16, events: bool = False,
                              lens: bool = False, lens_top_k: int = 5) -> GenerateResult | GenerationStream: ...
def generate_draft_speculative(model: Model, draft: Model, prompt: Prompt, config: GenerateConfig | None = None, *,
                               gamma: int = 4, draft_loops: int = 0, stream: bool = False, queue_size: int = 16,
                               **kw: Any) -> GenerateResult | GenerationStream: ...

def score(model: Model, tokens: Prompt, loops: int = 0) -> dict[str, Any]: ...
def score_last_token(model: Model, tokens: Prompt, loops: int = 0, top_k: int = 10,
                     logits: bool = True) -> dict[str, Any]: ...
def score_logit_lens(model: Model, tokens: Prompt, loops: int = 0, top_k: int = 5,
                     final_only: bool = False) -> dict[str, Any]: ...
def score_with_uncertainty(model: Model, tokens: Prompt, loops: int = 0) -> dict[str, Any]: ...
def score_with_consistency_escalation(model: Model, tokens: Prompt, depths: Sequence[int] = (2, 4, 8),
                                      signal: Literal["entropy", "margin", "disagreement"] = "entropy",
                                      threshold: float = 2.0) -> dict[str, Any]: ...

def generate_with_prefix(model: Model, cache: PrefixCache, prompt: Prompt, config: GenerateConfig | None = None,
                         **kw: Any) -> GenerateResult: ...
def resume_generate(handle: ResumeHandle, config: GenerateConfig | None = None, **kw: Any) -> GenerateResult: ...
def generate_with_pool(pool: PrefixPool, prompt: Prompt, config: GenerateConfig | None = None,
                       **kw: Any) -> GenerateResult: ...
