"""``python -m bookie``: the ``bookie`` command (the commands layer, bookie.appliance.cli)."""
import sys

from .appliance.console import main

sys.exit(main())
