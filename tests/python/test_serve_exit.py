"""`tinyloop serve` refuses what it cannot serve with exit status 2 and one line on stderr, as its
--help says: a model that cannot be loaded, a port already in use, --threads outside 1..256 (the
range of every tinyloop command). The server's answers are tested in test_server.py."""
from __future__ import annotations

import socket
import subprocess

import pytest


def serve(cli, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(cli), "serve", *args], capture_output=True, text=True, timeout=120)


def one_line(p: subprocess.CompletedProcess) -> str:
    assert p.stderr.startswith("tinyloop serve: "), p.stderr
    assert p.stderr.count("\n") == 1, p.stderr
    return p.stderr


def test_a_model_that_cannot_be_loaded_exits_2(cli, tmp_path):
    missing = tmp_path / "missing.tinyloop"
    p = serve(cli, str(missing), "--port", "0")
    assert p.returncode == 2, p.stderr
    assert str(missing) in one_line(p)
    junk = tmp_path / "junk.tinyloop"
    junk.write_text("not a model")
    p = serve(cli, str(junk), "--port", "0")
    assert p.returncode == 2, p.stderr
    assert "junk.tinyloop" in one_line(p)


def test_a_port_in_use_exits_2(cli, model_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        p = serve(cli, str(model_path), "--port", str(port))
    assert p.returncode == 2, p.stderr
    line = one_line(p)
    assert "--port %d" % port in line and "in use" in line


@pytest.mark.parametrize("threads", ["0", "257"])
def test_threads_outside_1_to_256_exit_2(cli, model_path, threads):
    p = serve(cli, str(model_path), "--threads", threads, "--port", "0")
    assert p.returncode == 2, p.stderr
    line = one_line(p)
    assert "--threads" in line and "[1, 256]" in line
