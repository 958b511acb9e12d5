#!/usr/bin/env python3
"""Train the small tokenizer.json files the hf_byte_bpe tests use (tests/data/hf_tokenizers/).

Two byte-level BPE tokenizers trained with the `tokenizers` package on a corpus built here (the
repository's own Markdown and sources plus a few scripts of other languages), shaped like the
published ones:

  ouro:   Ouro / SmolLM2: Digits(individual_digits) then ByteLevel(use_regex: the GPT-2 pattern),
          SmolLM2's special tokens (<|endoftext|>, <|im_start|>, <|im_end|>, ...), a ChatML
          chat template, a ByteLevel post-processor (adds nothing).
  huginn: Huginn-0125: Split(its "aeolian" regex, Isolated) then ByteLevel(use_regex false), its
          36 special tokens, a TemplateProcessing post-processor "<|begin_text|> $A <|end_text|>"
          (the converter encodes with add_special_tokens=True and drops the last id), and its
          chat template.

The Huginn pattern and chat template are data copied from github.com/seal-rg/recurrent-pretraining
(commit 59e0b69b2d96a59cbbe79c9d5034d89ecb5ab6f6): the pattern from
scripts/tokenizer_generation.py, get_regex_from_normalization_rule_name("aeolian") (the default of
create_tokenizer); the chat template from evaluate_raven/checkpoint_to_hf_converter.py. The
vocabularies are small (2,000 ids) and trained here, not the published ones.

usage: make_test_tokenizers.py OUT_DIR   (writes OUT_DIR/{ouro,huginn}/tokenizer*.json)
"""
import json
import os
import pathlib
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

ROOT = pathlib.Path(__file__).resolve().parents[2]

HUGINN_PATTERN = r"(\\n(?:e(?:wcommand|wenvironment|wline|wpage|wtheorem)|abla|e|eq|geq|gtr|leq|exists|ocite|oindent|olinebreak|onumber|opagebreak|ormalsize|ot(?!(?:ag\b|\b)))\b|\n+|\\n(?!\b)|\p{N}{1,1}|(?:[ \t](?:==|!=|<=|>=|<<|>>|\*\*|//|\+=|-=|\*=|/=|%=|&=|\|=|\^=|<<=|>>=|\*\*=|//=|:=|\+\+|--|[\p{L}]+[''ʼ](?:\p{L}+)\b|\\[a-zA-Z]+|\\{|\\}|{|}|\\\[|\\\]|\[|\]|\(|\)|_+|\||\+|-|\*|—|-|=|\*\*|^|[.,!?;()]|\$\$?|`+|\"+|\#+|\p{N}+(?:st|nd|rd|th)|<0x[0-9A-Fa-f]{1,2}>)|[^\r\n\p{L}\p{N}]?\p{L}+|[\p{P}\p{S}])|\s+|\p{So})"

HUGINN_SPECIALS = [
    "<|begin_text|>", "<|end_text|>", "<|begin_header|>", "<|end_header|>", "<|end_turn|>", "<|pad|>",
    "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|...|>", "<|del|>",
    "<|c_0|>", "<|c_1|>", "<|c_2|>", "<|c_3|>", "<|c_4|>", "<|c_5|>", "<|c_6|>", "<|c_7|>", "<|c_8|>",
    "<|c_9|>", "<|?|>", "<|&|>", "<|!|>", "<|-|>", "<|+|>", "<|interrupt|>", "<|>>-|>", "<|-<<|>",
    "<|->>|>", "<|<<-|>", "<|tool_out|>", "<|end_tool|>", "<|tool_in|>", "<|end_tool_in|>",
]

HUGINN_CHAT_TEMPLATE = "{% set loop_messages = messages %}{% for message in loop_messages %}{% set start_content = '<|begin_header|>' %}{% set end_content = message['content'] | trim  + '<|end_turn|>' %}{% if loop.index0 == 0 %}{% set start_content = bos_token + start_content %}{% endif %}{% if message['role'] == 'Huginn' or message['role'] == 'assistant' %}{% set start_content = start_content + 'Huginn<|end_header|>\n\n' %}{{ start_content }}{% generation %}{{ end_content }}{% endgeneration %}{% else %}{% set start_content = start_content + message['role'] + '<|end_header|>\n\n' %}{{ start_content }}{{ end_content }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|begin_header|>Huginn<|end_header|>\n\n' }}{% else %}{{ '<|end_text|>' }}{% endif %}"

SMOL_SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>", "<file_sep>", "<filename>",
    "<gh_stars>", "<issue_start>", "<issue_comment>", "<issue_closed>", "<jupyter_start>", "<jupyter_text>",
    "<jupyter_code>", "<jupyter_output>", "<jupyter_script>", "<empty_output>",
]

# A ChatML template of the kind Ouro and SmolLM2 ship (a default system turn, then
# <|im_start|>role\ncontent<|im_end|>\n per message).
CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

EXTRA_TEXT = """
Die Würde des Menschen ist unantastbar. Ça coûte 12,50 € — très cher ! ¿Dónde está la biblioteca?
Съешь же ещё этих мягких французских булок, да выпей чаю. Γαζέες καὶ μυρτιὲς δὲν θὰ βρῶ πιὰ.
人人生而自由，在尊严和权利上一律平等。日本語のテキストも少し。한국어 문장도 있습니다.
العربية لغة جميلة. हिन्दी भी। ภาษาไทย 😀 🚀 👍🏽 ❤️ 1234567890 3.14159 2026-12-03 10:45:00
def f(x):\n    return x ** 2  # square\n\tif (a != b && c <= d) { y += 1; }\n
\\newcommand{\\R}{\\mathbb{R}} $$\\int_0^1 x^2 dx$$ I'm you're we'll they'd it's don't
"""


def corpus():
    texts = [EXTRA_TEXT] * 20
    for pattern in ("*.md", "docs/*.md", "engine/src/text/*.cpp", "app/serve/*.py"):
        for p in sorted(ROOT.glob(pattern)):
            texts.append(p.read_text(encoding="utf-8", errors="replace"))
    return texts


def train(pre, specials, vocab_size, added=()):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[AddedToken(s, special=True, normalized=False) for s in specials],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    if added:
        tok.add_tokens([AddedToken(a, special=False, normalized=False) for a in added])
    return tok


def write(out, name, tok, config):
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps(config, indent=1, ensure_ascii=False) + "\n")


def main():
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "tests/data/hf_tokenizers")
    ouro = train(
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]),
        SMOL_SPECIALS, 2000)
    ouro.post_processor = processors.ByteLevel(trim_offsets=False)
    write(out, "ouro", ouro, {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
                              "chat_template": CHATML_TEMPLATE, "tokenizer_class": "GPT2Tokenizer"})

    huginn = train(
        pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(HUGINN_PATTERN), behavior="isolated", invert=False),
                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        HUGINN_SPECIALS, 2000, added=('"""', "Huginn"))
    huginn.post_processor = processors.TemplateProcessing(
        single="<|begin_text|> $A <|end_text|>",
        special_tokens=[("<|begin_text|>", huginn.token_to_id("<|begin_text|>")),
                        ("<|end_text|>", huginn.token_to_id("<|end_text|>"))])
    write(out, "huginn", huginn, {"bos_token": "<|begin_text|>", "eos_token": "<|end_text|>",
                                  "chat_template": HUGINN_CHAT_TEMPLATE,
                                  "tokenizer_class": "PreTrainedTokenizerFast"})
    for name in ("ouro", "huginn"):
        print(name, os.path.getsize(out / name / "tokenizer.json"), "bytes")


if __name__ == "__main__":
    main()
