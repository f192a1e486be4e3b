import sys

from kappalab.analyze import main

raise SystemExit(main(sys.argv[1:]))
