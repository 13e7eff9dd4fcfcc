"""``python -m rl``: see :mod:`rl.cli`."""

import sys

from rl.cli import main

sys.exit(main())
