"""``python -m rfkit.validation`` is the ``rfkit`` command."""

import sys

from rfkit.validation.cli import main

sys.exit(main())
