"""``python -m mnemosyne``: the same command as ``mnemosyne``."""

import sys

from mnemosyne.cli import main

sys.exit(main())
