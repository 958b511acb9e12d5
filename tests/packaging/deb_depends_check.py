#!/usr/bin/env python3
"""The .deb says what it needs: builds it with `cpack -G DEB` from a built tree, unpacks it, and
checks its control fields against what it installs:

  * every library `ldd` reports for every ELF file in the package (programs and the binding)
    belongs to a Debian package (dpkg -S says which) that Depends names when the file links
    it directly (readelf's NEEDED), or that Depends pulls in (apt-cache depends --recurse);
  * every third-party module the packaged server (share/tinyloop/serve/*.py) imports comes from
    a Debian package named in Depends (dpkg -S on the file /usr/bin/python3 imports it from;
    for a module this machine lacks, Debian's python3-<name> convention, confirmed by apt-cache);
  * the binding's ABI tag (cpython-3XY) is pinned: Depends has python3 (>= 3.X), (<< 3.X+1);
  * the binding sits in a folder on Debian python3's sys.path for /usr, and imports from there;
  * every app/serve/*.py of the checkout is in the package (the server's modules import each
    other: one left out breaks `tinyloop serve`);
  * the Homepage is absent or a real address (not example.org/com/net).

    deb_depends_check.py --build BUILD --source CHECKOUT --work DIR
Exit status 0 only when every check held; each failure names the file, module or library.
"""
from __future__ import annotations

import argparse
import ast
import glob
import os
import re
import shutil
import subprocess
import sys
import time

T0 = time.monotonic()
problems: list[str] = []


def say(msg: str) -> None:
    print("[%6.1f s] %s" % (time.monotonic() - T0, msg), flush=True)


def out(cmd: list[str], **kw) -> str:
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True, **kw).stdout


def depends_names(field: str) -> set[str]:
    """'a (>= 1), b | c, d:any' -> {a, b, c, d}: every name an alternative offers."""
    names = set()
    for clause in field.split(","):
        for alt in clause.split("|"):
            name = re.split(r"[\s(:]", alt.strip(), 1)[0]
            if name:
                names.add(name)
    return names


def spellings(path: str) -> list[str]:
    """`path` as given, resolved, and in the other merged-/usr spelling (dpkg knows one of them)."""
    real = os.path.realpath(path)
    out_ = [path, real]
    for p in (path, real):
        out_.append(p[len("/usr"):] if p.startswith("/usr/lib/") else "/usr" + p if p.startswith("/lib/") else p)
    return list(dict.fromkeys(out_))


def dpkg_owners(paths: list[str]) -> dict[str, str]:
    """{path: the Debian package that installed it} for those of `paths` dpkg knows (one call)."""
    queries = sorted({q for p in paths for q in spellings(p)})
    r = subprocess.run(["dpkg", "-S"] + queries, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    owner_of = {}
    for line in r.stdout.splitlines():
        if line.startswith("diversion") or ": " not in line:
            continue
        pkgs, f = line.split(": ", 1)
        owner_of[f.strip()] = pkgs.split(",")[0].split(":")[0].strip()
    return {p: next(owner_of[q] for q in spellings(p) if q in owner_of)
            for p in paths if any(q in owner_of for q in spellings(p))}


def depends_closure(names: set[str]) -> set[str]:
    """`names` and every package they depend on, recursively (apt-cache, from the local lists)."""
    r = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
                        "--no-breaks", "--no-replaces", "--no-enhances"] + sorted(names),
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    closure = set(names)
    for line in r.stdout.splitlines():
        m = re.match(r"\s*\|?(?:Pre)?Depends: <?([^>\s:]+)", line) or re.match(r"^([^\s<:]+)", line)
        if m:
            closure.add(m.group(1))
    return closure


def is_elf(path: str) -> bool:
    if os.path.islink(path) or not os.path.isfile(path):
        return False
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True, help="the built CMake tree (with CPackConfig.cmake)")
    ap.add_argument("--source", required=True, help="the checkout")
    ap.add_argument("--work", required=True, help="scratch folder for the package and its unpacked files")
    ap.add_argument("--python", default="/usr/bin/python3", help="Debian's interpreter, whose path the package serves")
    args = ap.parse_args()
    build, src, work = (os.path.abspath(p) for p in (args.build, args.source, args.work))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    say("cpack -G DEB (%s)" % build)
    t = time.monotonic()
    r = subprocess.run(["cpack", "-G", "DEB", "-B", work, "--config", os.path.join(build, "CPackConfig.cmake")],
                       cwd=build, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    debs = glob.glob(os.path.join(work, "*.deb"))
    if r.returncode != 0 or len(debs) != 1:
        print(r.stdout[-6000:])
        print("FAIL: cpack -G DEB: exit status %d, packages %s" % (r.returncode, debs))
        return 1
    deb = debs[0]
    say("built %s (%.1f MB) in %.1f s" % (os.path.basename(deb), os.path.getsize(deb) / 1e6, time.monotonic() - t))

    depends_field = out(["dpkg-deb", "-f", deb, "Depends"]).strip()
    depends = depends_names(depends_field)
    say("Depends: %s" % depends_field)
    homepage = out(["dpkg-deb", "-f", deb, "Homepage"]).strip()
    if re.search(r"example\.(org|com|net)", homepage):
        problems.append("Homepage is a placeholder: %s" % homepage)
    say("Homepage: %s" % (homepage or "(none)"))

    root = os.path.join(work, "root")
    out(["dpkg-deb", "-x", deb, root])

    # --- libraries of the ELF files
    elves = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if is_elf(os.path.join(d, f))]
    if not elves:
        problems.append("the package holds no ELF file (no programs, no binding)")
    # A library an ELF file names (NEEDED) must come from a package Depends names (what
    # dpkg-shlibdeps derives); one it needs only through another library must come from a package
    # that Depends pulls in (its dependency closure).
    libs: dict[str, tuple[str, bool]] = {}  # library path -> (first file needing it, named directly)
    for elf in sorted(elves):
        needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out(["readelf", "-d", elf])))
        for line in out(["ldd", elf]).splitlines():
            line = line.strip()
            if "not found" in line:
                problems.append("%s: ldd: %s" % (os.path.relpath(elf, root), line))
            m = re.match(r"(\S+) => (/\S+)", line)
            if m:
                prev = libs.get(m.group(2))
                direct = m.group(1) in needed
                if prev is None or (direct and not prev[1]):
                    libs[m.group(2)] = (os.path.relpath(elf, root), direct)
    owners = dpkg_owners(sorted(libs))
    closure = depends_closure(depends)
    lib_pkgs: dict[str, list[str]] = {}
    for lib, (who, direct) in sorted(libs.items()):
        pkg = owners.get(lib)
        if pkg is None:
            problems.append("%s needs %s, which no Debian package installed" % (who, lib))
            continue
        lib_pkgs.setdefault(pkg, []).append(os.path.basename(lib))
        if direct and pkg not in depends:
            problems.append("%s links %s from %s, which Depends does not name" % (who, os.path.basename(lib), pkg))
        elif not direct and pkg not in closure:
            problems.append("%s needs %s (through another library) from %s, which nothing in Depends pulls in"
                            % (who, os.path.basename(lib), pkg))
    direct_pkgs = sorted({owners[l] for l, (_, d) in libs.items() if d and l in owners})
    say("%d ELF files (%s) need %d libraries from %d packages; those they link directly: %s"
        % (len(elves), ", ".join(sorted(os.path.relpath(e, root) for e in elves)), len(libs), len(lib_pkgs),
           ", ".join(direct_pkgs)))

    # --- the binding: ABI pin, and on Debian python3's path
    sos = [e for e in elves if re.match(r"tinyloop_py\..*\.so$", os.path.basename(e))]
    if len(sos) != 1:
        problems.append("expected one tinyloop_py binding in the package, found %s" % [os.path.relpath(s, root) for s in sos])
    else:
        so = sos[0]
        where = "/" + os.path.relpath(os.path.dirname(so), root)
        m = re.search(r"cpython-(\d)(\d+)", os.path.basename(so))
        if m:
            major, minor = int(m.group(1)), int(m.group(2))
            for want in ("python3 (>= %d.%d)" % (major, minor), "python3 (<< %d.%d)" % (major, minor + 1)):
                if want not in depends_field:
                    problems.append("the binding %s is built for Python %d.%d; Depends lacks '%s'"
                                    % (os.path.basename(so), major, minor, want))
        sys_path = out([args.python, "-I", "-c", "import sys; print('\\n'.join(sys.path))"]).split()
        if where not in sys_path:
            problems.append("the binding is installed in %s, which %s does not search (its sys.path: %s)"
                            % (where, args.python, ", ".join(p for p in sys_path if p)))
        r = subprocess.run([args.python, "-c", "import tinyloop_py; print(tinyloop_py.__file__)"],
                           env={"PYTHONPATH": os.path.dirname(so), "PATH": os.environ.get("PATH", "")},
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            problems.append("the packaged binding does not import: %s" % r.stdout.strip()[-500:])
        say("binding %s in %s (on python3's path: %s)" % (os.path.basename(so), where, where in sys_path))

    # --- the server: every module shipped, every import depended on
    serve = os.path.join(root, "usr/share/tinyloop/serve")
    shipped = sorted(glob.glob(os.path.join(serve, "*.py")))
    for f in sorted(glob.glob(os.path.join(src, "app/serve/*.py"))):
        if not os.path.exists(os.path.join(serve, os.path.basename(f))):
            problems.append("app/serve/%s is not in the package (share/tinyloop/serve)" % os.path.basename(f))
    own = {os.path.splitext(os.path.basename(f))[0] for f in shipped} | {"tinyloop_py", "__future__"}
    imports: dict[str, str] = {}
    for f in shipped:
        for node in ast.walk(ast.parse(open(f, encoding="utf-8").read(), f)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for n in names:
                top = n.split(".")[0]
                if top not in sys.stdlib_module_names and top not in own:
                    imports.setdefault(top, os.path.basename(f))
    if not shipped:
        problems.append("the package holds no server (share/tinyloop/serve/*.py)")
    found = []
    for mod, who in sorted(imports.items()):
        r = subprocess.run([args.python, "-I", "-c", "import importlib.util as u, sys; "
                            "s = u.find_spec(sys.argv[1]); print(s.origin if s and s.origin else '')", mod],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        origin = r.stdout.strip()
        pkg = dpkg_owners([origin]).get(origin) if origin else None
        how = "dpkg -S %s" % origin
        if pkg is None:  # not installed here (or not from a Debian package): Debian's naming policy
            pkg = "python3-" + mod.lower().replace("_", "-")
            how = "not installed here; Debian's name"
            if subprocess.run(["apt-cache", "show", pkg], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode != 0:
                problems.append("%s imports %s: no Debian package found for it (%s not in apt-cache)" % (who, mod, pkg))
                continue
        found.append("%s->%s" % (mod, pkg))
        if pkg not in depends:
            problems.append("share/tinyloop/serve/%s imports %s (Debian package %s, %s), which Depends does not name"
                            % (who, mod, pkg, how))
    say("server: %d modules; third-party imports %s" % (len(shipped), ", ".join(found)))

    if problems:
        for p in problems:
            print("FAIL: " + p)
        return 1
    say("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
