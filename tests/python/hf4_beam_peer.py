"""transformers 4.x's group (diverse) beam search, run for tests/python/test_hf_peer_beams.py.

transformers 5 moved _group_beam_search out of the library to a Hub `custom_generate`
repository, which CI cannot reach; transformers 4.53.3 (tests/python/requirements-peer-hf4.txt,
installed by packaging/setup.sh into <build>/hf4-peer with `pip install --target`) still has it
in the library. This script runs in its own process with that folder first on sys.path, so it
imports transformers 4.53.3 with the test venv's torch while the test process keeps
transformers 5.

    python hf4_beam_peer.py HF4_DIR < request.json > answer.json

request: [{"model": path, "loops": n, "runs": [{"prompt": [ids], "max_new_tokens": n,
"config": {GenerationConfig fields}}]}, ...]; answer: {"version": "4.53.3", "models": [[{"sequences":
[[ids], ...], "scores": [float, ...]} per run] per model]} with each continuation cut after its
first EOS (transformers pads the shorter ones with EOS).
"""
import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, sys.argv[1])
sys.path.insert(1, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import GenerationConfig  # noqa: E402

from test_hf_peer import unroll  # noqa: E402


def main():
    assert transformers.__version__.startswith("4."), f"expected transformers 4.x, got {transformers.__version__}"
    warnings.simplefilter("ignore")
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    answer = []
    for part in json.load(sys.stdin):
        model, eos = unroll(part["model"], part["loops"])
        answer.append([generate(model, eos, run) for run in part["runs"]])
    json.dump({"version": transformers.__version__, "models": answer}, sys.stdout)


def generate(model, eos, run):
    ids = torch.tensor([run["prompt"]])
    cfg = GenerationConfig(max_new_tokens=run["max_new_tokens"], eos_token_id=eos, pad_token_id=eos,
                           bos_token_id=None, do_sample=False, **run["config"])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=cfg,
                             output_scores=True, return_dict_in_generate=True)
    seqs = [row[:row.index(eos) + 1] if eos in row else row
            for row in out.sequences[:, len(run["prompt"]):].tolist()]
    scores = out.sequences_scores.tolist() if hasattr(out, "sequences_scores") else [None] * len(seqs)
    return {"sequences": seqs, "scores": scores}


if __name__ == "__main__":
    main()
