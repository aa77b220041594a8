"""``python -m search.mag``: MAG's search CLI (``search.mag.run``)."""

import sys

from search.mag.run import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
