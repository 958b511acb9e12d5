"""The binding and the command line resolve the same run.

For each bundled model and each mode, with nothing else set and again with the depth set
(loops=3 / --loops 3), the run `tinyloop_py.resolve_run` returns equals the config the CLI's
`generate --max-tokens 0 --json` echoes: the mode the engine runs, the depth, temperature, beam
width, early-exit policy and speculation knobs. ui.test_front_end_runs holds the workbench to the
same CLI echo, so the three front ends agree field by field.
"""
from __future__ import annotations

import pytest

import tinyloop_py as tl
from conftest import ROOT, run_cli

MODELS = sorted(ROOT.glob("resources/models/*/model-q4.tinyloop"))  # q4: the smallest file
MODES = ["greedy", "sample", "early-exit", "beam", "speculative", "tree", "pipelined"]


def cli_flags(mode: str) -> list[str]:
    # early exit on the command line: the model's policy, with nothing else set
    return ["--early-exit", "model"] if mode == "early-exit" else ["--mode", mode]


def decided(mode: str, config: dict, speculation: dict) -> dict:
    """The fields the resolver decides, in the codec's names. The early-exit policy counts when
    early exit is on (patience > 0); off, its fields are unused."""
    out = {k: config[k] for k in ("loops", "temperature", "beam_size", "early_exit_patience")}
    out["mode"] = mode
    if config["early_exit_patience"] > 0:
        for k in ("early_exit_criterion", "early_exit_threshold", "early_exit_min_L", "early_exit_peek_every"):
            out[k] = config[k]
    if mode in ("speculative", "tree", "pipelined"):
        for k in ("draft_loops", "verify_loops"):
            out[k] = speculation[k]
    if mode in ("speculative", "tree"):
        out["draft_ahead"] = speculation["draft_ahead"]
    if mode == "tree":
        out["branches"] = speculation["branches"]
    return out


def test_the_bundled_models_are_found():
    assert len(MODELS) >= 2, MODELS


@pytest.mark.parametrize("path", MODELS, ids=[p.parent.name for p in MODELS])
def test_binding_and_cli_resolve_the_same_run(cli, path):
    with tl.load_model(str(path), backend="cpu") as model:
        for loops in (0, 3):
            for mode in MODES:
                kw = {"loops": loops} if loops else {}
                run = tl.resolve_run(model, mode, **kw)
                mine = decided(run["mode"], run["config"], run["speculation"])
                args = ["generate", str(path), "--prompt", "In the", "--max-tokens", "0", *cli_flags(mode)]
                if loops:
                    args += ["--loops", str(loops)]
                echo = run_cli(cli, *args)["config"]
                theirs = decided(echo["mode"], echo, echo)
                assert mine == theirs, f"{path.parent.name} {mode} loops={loops}:\n binding {mine}\n CLI     {theirs}"
