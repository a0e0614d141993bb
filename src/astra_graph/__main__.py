"""``python -m astra_graph``: the ``astra`` command line."""

import sys

from astra_graph.cli import main

sys.exit(main())
