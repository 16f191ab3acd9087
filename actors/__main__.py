"""``python -m actors`` runs the ``trio-agents`` command line."""

import sys

from .cli import main

sys.exit(main())
