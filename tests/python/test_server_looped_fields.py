"""app/serve: the looped-model fields of a request (loops, early_exit with the exit gate,
kv_sharing), the per-token depth extension field `tinyloop_depth` (read through the official
openai client, which keeps it as an extra field and otherwise ignores it), and
`tinyloop serve HF_FOLDER` importing the folder once into a cache."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import openai
import pytest
from fastapi.testclient import TestClient

import tinyloop_py as tl
from conftest import ROOT, free_port

sys.path.insert(0, str(ROOT / "app" / "serve"))
import server  # noqa: E402


@pytest.fixture(scope="module")
def ouro(imported_ouro):
    m = tl.load_model(str(imported_ouro[1]), backend="cpu")
    yield m
    m.free()


@pytest.fixture(scope="module")
def client(ouro):
    with TestClient(server.create_app(ouro)) as c:
        yield c


BODY = {"prompt": "hello", "max_tokens": 6, "temperature": 0, "ignore_eos": True}


def test_kv_sharing_shrinks_the_cache_and_follows_the_engine(client, ouro):
    per = client.post("/v1/completions", json=dict(BODY, kv_sharing="per-pass")).json()
    last = client.post("/v1/completions", json=dict(BODY, kv_sharing="last-pass")).json()
    comp = client.post("/v1/completions", json=dict(BODY, kv_sharing="compress-s2")).json()
    b = [r["tinyloop_stats"][0]["kv_cache_bytes"] for r in (per, last, comp)]
    assert b[1] < b[0] and b[2] < b[0], b
    # the same text generate() gives with the same field
    for r, mode in ((last, "last-pass"), (comp, "compress-s2")):
        want = tl.generate(ouro, "hello", max_tokens=6, temperature=0.0, ignore_eos=True, kv_sharing=mode)
        assert r["choices"][0]["text"] == want["text"], mode


@pytest.mark.parametrize("value, needle", [("every-pass", "is not one of per-pass, last-pass"),
                                           ("compress-s0", "outside [1, 1024]"),
                                           ("compress-s5000", "outside [1, 1024]")])
def test_bad_kv_sharing_is_400_naming_it(client, value, needle):
    r = client.post("/v1/completions", json=dict(BODY, kv_sharing=value))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "kv_sharing" and needle in err["message"], err


def test_kv_sharing_with_speculation_or_beams_is_400(client):
    r = client.post("/v1/completions", json=dict(BODY, kv_sharing="last-pass", speculative={"draft_loops": 1}))
    assert r.status_code == 400 and r.json()["error"]["param"] == "kv_sharing", r.text
    r = client.post("/v1/completions", json=dict(BODY, kv_sharing="last-pass", beam_size=2, n=1))
    assert r.status_code == 400 and r.json()["error"]["param"] == "kv_sharing", r.text


def test_gate_exits_report_each_tokens_depth(client, ouro):
    loops = ouro.hparams["default_loops"]
    for crit in ("gate", "gate_stop", "gate_select"):
        body = dict(BODY, loops=loops, early_exit={"criterion": crit, "threshold": 0.3})
        r = client.post("/v1/completions", json=body)
        assert r.status_code == 200, r.text
        c = r.json()["choices"][0]
        assert len(c["tinyloop_depth"]) == r.json()["usage"]["completion_tokens"]
        assert all(1 <= d <= loops for d in c["tinyloop_depth"]), c["tinyloop_depth"]
        assert c["tinyloop_depth"] == r.json()["tinyloop_stats"][0]["depth_per_token"]
    # streamed: the chunks' depths, in order, are the plain response's
    body = dict(BODY, loops=loops, early_exit={"criterion": "gate", "threshold": 0.3})
    plain = client.post("/v1/completions", json=body).json()["choices"][0]["tinyloop_depth"]
    streamed = []
    with client.stream("POST", "/v1/completions", json=dict(body, stream=True)) as s:
        for line in s.iter_lines():
            if line.startswith("data: {"):
                import json
                for ch in json.loads(line[6:]).get("choices", []):
                    streamed += ch.get("tinyloop_depth", [])
    assert streamed == plain


@pytest.mark.parametrize("body, param", [
    ({"early_exit": {"criterion": "gate", "threshold": 1.5}}, "early_exit"),
    ({"early_exit": {"criterion": "gates"}}, "early_exit"),
    ({"loops": 99}, "loops"),
])
def test_bad_looped_fields_are_400_naming_them(client, body, param):
    r = client.post("/v1/completions", json=dict(BODY, **body))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.json()


def test_official_client_ignores_the_depth_field(imported_ouro):
    from conftest import RunningServer
    srv = RunningServer(imported_ouro[1])
    try:
        oa = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0, timeout=60)
        r = oa.completions.create(model="ouro", prompt="hello", max_tokens=4, temperature=0,
                                  extra_body={"loops": 2, "kv_sharing": "last-pass", "ignore_eos": True,
                                              "early_exit": {"criterion": "gate_select", "threshold": 0.5}})
        assert r.choices[0].text is not None and r.usage.completion_tokens == 4
        assert r.choices[0].model_extra["tinyloop_depth"] and len(r.choices[0].model_extra["tinyloop_depth"]) == 4
        c = oa.chat.completions.create(model="ouro", messages=[{"role": "user", "content": "hi"}], max_tokens=3,
                                       temperature=0, extra_body={"kv_sharing": "compress-s4", "ignore_eos": True})
        assert len(c.choices[0].model_extra["tinyloop_depth"]) == 3
    finally:
        srv.stop()


def serve_folder(cli, folder, cache) -> tuple[subprocess.Popen, str, str]:
    port = free_port()
    env = dict(os.environ, TINYLOOP_IMPORT_CACHE=str(cache), TINYLOOP_PYTHON=sys.executable)
    p = subprocess.Popen([str(cli), "serve", str(folder), "--port", str(port), "--log-level", "warning"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = "http://127.0.0.1:%d" % port
    deadline = time.time() + 120
    while time.time() < deadline:
        if p.poll() is not None:
            raise RuntimeError(p.stdout.read())
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                return p, base, ""
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    p.kill()
    raise RuntimeError("serve did not start")


def stop(p: subprocess.Popen) -> str:
    p.terminate()
    out, _ = p.communicate(timeout=30)
    return out


def test_serve_a_hugging_face_folder_imports_once(cli, imported_ouro, tmp_path):
    folder = imported_ouro[0]
    cache = tmp_path / "cache"
    p, base, _ = serve_folder(cli, folder, cache)
    try:
        r = httpx.post(base + "/v1/completions", json=dict(BODY, kv_sharing="last-pass"), timeout=60).json()
        assert len(r["choices"][0]["tinyloop_depth"]) == 6
    finally:
        out = stop(p)
    files = list(cache.glob("*.tinyloop"))
    assert len(files) == 1 and "importing" in out, out
    mtime = files[0].stat().st_mtime_ns
    p, base, _ = serve_folder(cli, folder, cache)
    try:
        assert httpx.get(base + "/v1/models", timeout=10).status_code == 200
    finally:
        out = stop(p)
    assert "imported before" in out and "importing" not in out, out
    assert list(cache.glob("*.tinyloop")) == files and files[0].stat().st_mtime_ns == mtime


def test_a_command_opens_a_hugging_face_folder_through_the_same_cache(cli, imported_ouro, tmp_path):
    """`tinyloop generate FOLDER` imports the folder once into the import cache serve uses (the
    entry serve made is the one generate reads), and its output equals the imported file's."""
    folder = imported_ouro[0]
    cache = tmp_path / "cache"
    env = dict(os.environ, TINYLOOP_IMPORT_CACHE=str(cache))
    args = ["generate", "--prompt", "hello", "--max-tokens", "6", "--ignore-eos", "--json"]
    first = subprocess.run([str(cli), args[0], str(folder), *args[1:]], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert "importing" in first.stderr and "imported before" not in first.stderr, first.stderr
    files = list(cache.glob("*.tinyloop"))
    assert len(files) == 1
    second = subprocess.run([str(cli), args[0], str(folder), *args[1:]], env=env, capture_output=True, text=True)
    assert second.returncode == 0 and "imported before" in second.stderr and "importing" not in second.stderr, second.stderr
    assert list(cache.glob("*.tinyloop")) == files
    imported = tmp_path / "ref.tinyloop"  # what `tinyloop import` writes with its defaults
    subprocess.run([str(cli), "import", str(folder), str(imported)], check=True, capture_output=True)
    ref = subprocess.run([str(cli), args[0], str(imported), *args[1:]], capture_output=True, text=True)
    assert ref.returncode == 0, ref.stderr
    assert json.loads(second.stdout)["output_ids"] == json.loads(ref.stdout)["output_ids"]
    assert json.loads(first.stdout)["output_ids"] == json.loads(ref.stdout)["output_ids"]
    # the same entry serves: serve finds it imported before
    p, base, _ = serve_folder(cli, folder, cache)
    out = stop(p)
    assert "imported before" in out and "importing" not in out, out
    # a folder without config.json is refused by name, exit status 2
    bad = tmp_path / "not-a-checkpoint"
    bad.mkdir()
    r = subprocess.run([str(cli), "generate", str(bad), "--prompt", "x"], env=env, capture_output=True, text=True)
    assert r.returncode == 2 and "without config.json" in r.stderr, r.stderr
