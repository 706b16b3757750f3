"""``python -m graphlens`` is the ``graphlens`` command."""

import sys

from graphlens.cli import main

sys.exit(main())
