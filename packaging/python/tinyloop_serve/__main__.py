"""python -m tinyloop_serve MODEL [options]: the same as the console script tinyloop-serve."""
import sys

from tinyloop_serve import main

sys.exit(main())
