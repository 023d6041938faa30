import sys

from pyg_lie.cli import main

sys.exit(main())
