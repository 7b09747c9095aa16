"""``python -m vdifrec.cli``: the ``vdifrec`` command, for environments whose scripts folder is not
on PATH (and for tests, which run the command in the interpreter under test)."""

import sys

from . import main

sys.exit(main())
