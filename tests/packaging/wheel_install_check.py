#!/usr/bin/env python3
"""The wheel as a user gets it: `pip wheel .` from the checkout, installed into a fresh virtual
environment (no system site-packages, no PYTHONPATH), then

  1. the wheel holds the binding, its stub, every server module, the bundled models and the
     console script, and declares a dependency for every third-party import of app/serve/*.py;
  2. `import tinyloop_py` and the README's Python example (its first ```python block, run
     from the checkout as the README says) work from the venv;
  3. `tinyloop-serve MODEL --port 0` (MODEL: the wheel's own copy of the bundled q4 model)
     answers the official OpenAI client's /v1/completions request with the same greedy text
     as the binding's own tl.generate on that model.

Wheels (scikit-build-core, pybind11, fastapi, ..., openai) come from a cache folder (default
~/.cache/tinyloop-wheels, as packaging/setup.sh uses for the peer tests): a machine downloads
what is missing once, then the test runs offline. Versions are constrained by
tests/python/requirements.txt, the ones the server's own tests use.

    wheel_install_check.py --source CHECKOUT --work DIR [--python /usr/bin/python3]

DIR keeps the CMake build folder between runs, so a rerun recompiles only what changed (the
compiler goes through ccache when the machine has it). Exit status 0 only when every check held.
"""
from __future__ import annotations

import argparse
import ast
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import zipfile

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

T0 = time.monotonic()


def say(msg: str) -> None:
    print("[%6.1f s] %s" % (time.monotonic() - T0, msg), flush=True)


def fail(msg: str) -> None:
    print("FAIL: %s" % msg, flush=True)
    sys.exit(1)


def clean_env() -> dict:
    """The environment of a user's shell: nothing pointing at the build tree or another venv."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP", "PIP_FIND_LINKS")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def run(cmd: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("env", clean_env())
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if p.returncode != 0:
        print(p.stdout[-6000:])
        fail("%s: exit status %d: %s" % (what, p.returncode, " ".join(cmd)))
    return p


def install_cached(pip: list[str], cache: str, reqs: list[str], constraints: str, what: str,
                   download: list[str] | None = None) -> None:
    """pip install `reqs` from `cache` alone; when something is missing there, downloads
    `download` (default `reqs`) into the cache first (the first run on a machine needs the
    network, later ones do not)."""
    offline = pip + ["install", "-q", "--no-index", "--find-links", cache, "-c", constraints] + reqs
    if subprocess.run(offline, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env()).returncode == 0:
        return
    say("downloading %s into %s (once per machine)" % (what, cache))
    os.makedirs(cache, exist_ok=True)
    run(pip + ["download", "-q", "-d", cache, "-c", constraints] + (download or reqs), "pip download " + what)
    run(offline, "pip install " + what)


def read_pyproject(path: str) -> dict:
    if tomllib is not None:
        with open(path, "rb") as f:
            return tomllib.load(f)
    # Python < 3.11 without tomli: the two lists this test needs, read with a regex.
    text = open(path, encoding="utf-8").read()
    out = {}
    for table, key in (("build-system", "requires"), ("project", "dependencies")):
        m = re.search(r"^%s\s*=\s*\[(.*?)\]" % key, text, re.S | re.M)
        out.setdefault(table, {})[key] = re.findall(r'"([^"]+)"', m.group(1)) if m else []
    return out


def third_party_imports(serve_dir: str) -> dict[str, str]:
    """Top-level modules app/serve/*.py import that are neither the standard library, nor the
    server's own modules, nor the binding: {module: the first file importing it}. loadcheck.py
    (the load-test client, not in the wheel) is left out."""
    files = sorted(f for f in glob.glob(os.path.join(serve_dir, "*.py")) if not f.endswith("loadcheck.py"))
    own = {os.path.splitext(os.path.basename(f))[0] for f in glob.glob(os.path.join(serve_dir, "*.py"))}
    own.add("tinyloop_py")
    found: dict[str, str] = {}
    for f in files:
        for node in ast.walk(ast.parse(open(f, encoding="utf-8").read(), f)):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for n in names:
                top = n.split(".")[0]
                if top not in sys.stdlib_module_names and top not in own and top != "__future__":
                    found.setdefault(top, os.path.basename(f))
    return found


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def readme_python_example(readme: str) -> str:
    text = open(readme, encoding="utf-8").read()
    at = text.find("## Python and HTTP")
    m = re.search(r"```python\n(.*?)```", text[at:], re.S) if at >= 0 else None
    if not m:
        fail("README.md: no ```python block under '## Python and HTTP'")
    return m.group(1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", required=True, help="the checkout (where pyproject.toml is)")
    ap.add_argument("--work", required=True, help="scratch folder (the CMake build folder is kept here)")
    ap.add_argument("--python", default="/usr/bin/python3", help="the interpreter of the fresh venv")
    ap.add_argument("--wheels", default=os.environ.get("TINYLOOP_WHEEL_CACHE",
                                                      os.path.expanduser("~/.cache/tinyloop-wheels")))
    args = ap.parse_args()
    src, work = os.path.abspath(args.source), os.path.abspath(args.work)
    constraints = os.path.join(src, "tests/python/requirements.txt")
    os.makedirs(work, exist_ok=True)
    pyproject = read_pyproject(os.path.join(src, "pyproject.toml"))

    # --- 1. pip wheel . in a venv of its own holding the build requirements of pyproject.toml.
    # Without build isolation, so that pybind11's headers keep one path from run to run and a
    # rerun recompiles only what changed (an isolated build's headers sit in a new temporary
    # folder each time, and every file including them would compile again).
    tool = os.path.join(work, "tool-venv")
    if not os.path.exists(os.path.join(tool, "bin/python")):
        run([args.python, "-m", "venv", tool], "venv for pip wheel")
    pip_tool = [os.path.join(tool, "bin/python"), "-m", "pip"]
    install_cached(pip_tool, args.wheels, pyproject["build-system"]["requires"], constraints, "the build back end")
    dist = os.path.join(work, "dist")
    shutil.rmtree(dist, ignore_errors=True)
    say("pip wheel %s (engine + binding; CMake build folder %s/cmake-build)" % (src, work))
    t = time.monotonic()
    run(pip_tool + ["wheel", src, "--no-deps", "--no-build-isolation", "-w", dist,
                    "--config-settings", "build-dir=" + os.path.join(work, "cmake-build")], "pip wheel")
    wheels = glob.glob(os.path.join(dist, "tinyloop-*.whl"))
    if len(wheels) != 1:
        fail("pip wheel made %s, expected one tinyloop-*.whl" % os.listdir(dist))
    wheel = wheels[0]
    say("built %s (%.1f MB) in %.1f s" % (os.path.basename(wheel), os.path.getsize(wheel) / 1e6, time.monotonic() - t))

    # --- what the wheel holds
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = z.read(meta_name).decode()
        ep_name = next((n for n in names if n.endswith(".dist-info/entry_points.txt")), None)
        entry_points = z.read(ep_name).decode() if ep_name else ""
    serve_dir = os.path.join(src, "app/serve")
    want = ["tinyloop_py.pyi", "tinyloop_serve/__init__.py", "tinyloop_serve/__main__.py",
            "tinyloop_models/__init__.py", "tinyloop_models/tinyloop-kjv/model-q4.tinyloop",
            "tinyloop_models/tinyloop-kjv/model-f32.tinyloop"]
    want += ["tinyloop_serve/serve/" + os.path.basename(f) for f in glob.glob(os.path.join(serve_dir, "*.py"))
             if not f.endswith("loadcheck.py")]
    missing = [w for w in want if w not in names]
    if not any(re.fullmatch(r"tinyloop_py\..*\.so", n) for n in names):
        missing.append("tinyloop_py.<abi>.so")
    if missing:
        fail("the wheel lacks %s" % ", ".join(missing))
    if not re.search(r"^tinyloop-serve\s*=\s*tinyloop_serve:main\s*$", entry_points, re.M):
        fail("the wheel has no console script tinyloop-serve = tinyloop_serve:main (entry_points.txt: %r)"
             % entry_points)
    declared = {re.split(r"[ ;<>=!~\[(]", line.split(":", 1)[1].strip())[0].lower().replace("_", "-")
                for line in meta.splitlines() if line.startswith("Requires-Dist:")}
    say("wheel: %d files; Requires-Dist: %s" % (len(names), ", ".join(sorted(declared))))

    # --- 2. a fresh venv: the wheel, its dependencies and the OpenAI client, from the cache
    venv = os.path.join(work, "venv")
    shutil.rmtree(venv, ignore_errors=True)
    run([args.python, "-m", "venv", venv], "fresh venv")
    vpy = os.path.join(venv, "bin/python")
    t = time.monotonic()
    install_cached([vpy, "-m", "pip"], args.wheels, [wheel, "openai"], constraints,
                   "the server's packages and the OpenAI client",
                   download=pyproject["project"]["dependencies"] + ["openai"])
    say("installed the wheel and openai into a fresh venv in %.1f s" % (time.monotonic() - t))

    # Every third-party import of the server is a declared dependency (mapped module -> the
    # distribution that installed it, as the venv itself reports).
    imports = third_party_imports(serve_dir)
    probe = ("import importlib.metadata as m, json, sys; d = m.packages_distributions(); "
             "print(json.dumps({k: d.get(k, []) for k in sys.argv[1:]}))")
    dists = json.loads(run([vpy, "-c", probe] + sorted(imports), "packages_distributions").stdout)
    undeclared = []
    for mod, where in sorted(imports.items()):
        owners = {o.lower().replace("_", "-") for o in dists.get(mod, [])}
        if not owners:
            undeclared.append("%s (imported by %s; not installed by the wheel's dependencies)" % (mod, where))
        elif not owners & declared:
            undeclared.append("%s (imported by %s; from %s, not in Requires-Dist)" % (mod, where, "/".join(owners)))
    if undeclared:
        fail("server imports not declared as dependencies in pyproject.toml: " + "; ".join(undeclared))
    say("server imports %s: each declared" % ", ".join(sorted(imports)))

    where = run([vpy, "-c", "import tinyloop_py, tinyloop_serve, tinyloop_models; "
                 "print(tinyloop_py.__file__); print(tinyloop_models.path('tinyloop-kjv', 'q4'))"],
                "import tinyloop_py", cwd=work).stdout.split()
    if not all(p.startswith(venv + os.sep) for p in where):
        fail("tinyloop_py / the models were not found in the venv but at %s" % where)
    say("import tinyloop_py: %s" % where[0])
    model_q4 = where[1]

    t = time.monotonic()
    example = run([vpy, "-c", readme_python_example(os.path.join(src, "README.md"))], "the README's Python example",
                  cwd=src).stdout
    if "ppl" not in example or "tok/s" not in example:
        fail("the README's Python example printed no 'tok/s' or 'ppl' line:\n" + example)
    say("README example ran in %.1f s: %s" % (time.monotonic() - t, " | ".join(example.strip().splitlines()[-3:])))

    # --- 3. tinyloop-serve and one request through the official OpenAI client
    serve = os.path.join(venv, "bin/tinyloop-serve")
    log_path = os.path.join(work, "serve.log")
    log = open(log_path, "w")
    srv = subprocess.Popen([serve, model_q4, "--port", "0", "--threads", "2"], stdout=log, stderr=subprocess.STDOUT,
                           env=clean_env(), cwd=work)
    try:
        port, deadline = None, time.monotonic() + 60
        while port is None and time.monotonic() < deadline and srv.poll() is None:
            time.sleep(0.2)
            m = re.search(r"on http://127\.0\.0\.1:(\d+)/v1", open(log_path).read())
            if m and healthy(int(m.group(1))):
                port = int(m.group(1))
        if port is None:
            fail("tinyloop-serve did not answer /health within 60 s:\n" + open(log_path).read())
        say("tinyloop-serve %s listening on port %d" % (os.path.basename(model_q4), port))
        client = r"""
import json, sys
import openai, tinyloop_py as tl
port, model_path = int(sys.argv[1]), sys.argv[2]
c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % port, api_key="unused", max_retries=0, timeout=60)
ids = [m.id for m in c.models.list().data]
r = c.completions.create(model=ids[0], prompt="In the beginning", max_tokens=12, temperature=0)
with tl.load_model(model_path, threads=1) as model:
    ref = tl.generate(model, "In the beginning", max_tokens=12, temperature=0.0)
print(json.dumps({"models": ids, "text": r.choices[0].text, "finish": r.choices[0].finish_reason,
                  "usage": r.usage.completion_tokens, "ref": ref["text"]}))
"""
        got = json.loads(run([vpy, "-c", client, str(port), model_q4], "the OpenAI client request",
                             cwd=work).stdout.strip().splitlines()[-1])
        if got["models"] != ["model-q4"]:
            fail("/v1/models lists %s, expected ['model-q4']" % got["models"])
        if not got["text"] or got["text"] != got["ref"]:
            fail("/v1/completions greedy text %r differs from tl.generate's %r" % (got["text"], got["ref"]))
        say("OpenAI client /v1/completions: %r (%d tokens, %s), the same as tl.generate"
            % (got["text"], got["usage"], got["finish"]))
    finally:
        srv.send_signal(signal.SIGINT)
        try:
            srv.wait(20)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()
        log.close()
    say("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
