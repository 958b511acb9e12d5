"""The shared pieces of the tinyloop-kjv recipe, imported by this recipe (not copied).

model.py (FORMAT.md sections 1 and 1a), tinyloop_file.py (the file's writer and pure-Python
reader), tokenizer.py (FORMAT.md section 3) and export.py's model_from_file / tensor bytes.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
KJV = os.path.join(os.path.dirname(HERE), "tinyloop-kjv")
WORK = os.path.join(HERE, "work")
if KJV not in sys.path:
    sys.path.append(KJV)  # after this directory: our own module names win

import model  # noqa: E402,F401
import tinyloop_file  # noqa: E402,F401
import tokenizer  # noqa: E402,F401
from export import _tobytes as tensor_bytes, model_from_file  # noqa: E402,F401

HParams, LoopedLM = model.HParams, model.LoopedLM


def byte_tokenizer():
    """Bytes 0..255 plus <|endoftext|> = 256, no merges (vocabulary 257)."""
    return tokenizer.Tokenizer([], {tokenizer.EOT: 256})
