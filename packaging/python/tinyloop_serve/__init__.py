"""TinyLoop's OpenAI-compatible HTTP server as installed by `pip install .` (pyproject.toml).

    tinyloop-serve MODEL [--host 127.0.0.1] [--port 8080] [...]    the console script
    python -m tinyloop_serve MODEL [...]

Both take exactly the options of `tinyloop serve` (`tinyloop-serve --help` lists them): the
server is the checkout's app/serve/*.py, copied unchanged into the folder serve/ beside this
file. Those modules import one another by their plain names (`from chat import ...`), as they
do when run from the checkout, so main() puts that folder first on sys.path before importing
them. It does so only when called: importing this package changes nothing in the importer's
process, where plain names such as `chat` or `limits` could mean other packages.
"""
from __future__ import annotations

import os
import sys

SERVER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve")


def main(argv: list[str] | None = None) -> int:
    """Runs the server with `argv` (default: the command line); returns its exit status."""
    if SERVER_DIR not in sys.path:
        sys.path.insert(0, SERVER_DIR)
    import server  # app/serve/server.py

    return server.main(sys.argv[1:] if argv is None else argv)
