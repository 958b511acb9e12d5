"""The models bundled with TinyLoop, as installed by `pip install .` (pyproject.toml).

    import tinyloop_py as tl, tinyloop_models
    model = tl.load_model(tinyloop_models.path("tinyloop-kjv", "q4"))

    python -m tinyloop_models                      every bundled file, one path a line
    python -m tinyloop_models tinyloop-kjv q4      the path of one model file
    tinyloop-serve "$(python -m tinyloop_models tinyloop-kjv q4)" --port 8080

The same files as resources/models/<name>/ in the checkout (model-f32/q8/q4.tinyloop and the
model card README.md), so a script written against the checkout's paths runs on these.
"""
from __future__ import annotations

import os

DIR = os.path.dirname(os.path.abspath(__file__))
DTYPES = ("f32", "q8", "q4")


def names() -> list[str]:
    """The bundled models' names (their folders), sorted."""
    return sorted(e for e in os.listdir(DIR) if os.path.isdir(os.path.join(DIR, e)) and not e.startswith("_"))


def path(name: str = "tinyloop-kjv", dtype: str = "f32") -> str:
    """The absolute path of model `name`'s file in `dtype` (f32, q8 or q4)."""
    if name not in names():
        raise ValueError("tinyloop_models: name: '%s' is not a bundled model (bundled: %s)" % (name, ", ".join(names())))
    if dtype not in DTYPES:
        raise ValueError("tinyloop_models: dtype: '%s' is not one of %s" % (dtype, ", ".join(DTYPES)))
    p = os.path.join(DIR, name, "model-%s.tinyloop" % dtype)
    if not os.path.isfile(p):
        raise FileNotFoundError("tinyloop_models: %s has no %s file (%s)" % (name, dtype, p))
    return p
