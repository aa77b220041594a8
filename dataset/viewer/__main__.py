"""``python -m dataset.viewer``: see ``dataset.viewer.cli``."""

import sys

from dataset.viewer.cli import main

if __name__ == "__main__":
    sys.exit(main())
