"""What the course's command lines (python -m utils.roofline, .profile, .bench, .chat) share."""

from __future__ import annotations

import argparse
import sys


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit code 2, without the usage
    dump: 'python -m utils.X: error: <what was wrong and what is accepted>'."""

    def error(self, message: str) -> None:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)
