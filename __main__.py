import sys

from bookie.appliance.cli import main

sys.exit(main())
