"""python -m tinyloop_models [NAME [DTYPE]]: the bundled models' file paths (see __init__.py)."""
import os
import sys

import tinyloop_models as m

args = sys.argv[1:]
if len(args) > 2 or (args and args[0] in ("-h", "--help")):
    sys.stderr.write("usage: python -m tinyloop_models [NAME [f32|q8|q4]]   (NAME: %s)\n" % ", ".join(m.names()))
    sys.exit(2 if len(args) > 2 else 0)
if not args:
    for name in m.names():
        for f in sorted(os.listdir(os.path.join(m.DIR, name))):
            print(os.path.join(m.DIR, name, f))
    sys.exit(0)
try:
    print(m.path(*args))
except (ValueError, OSError) as exc:
    sys.stderr.write("%s\n" % exc)
    sys.exit(2)
