"""``python -m mnemosyne.cli``: the same command as ``mnemosyne``."""

import sys

from mnemosyne.cli.commands import main

sys.exit(main())
