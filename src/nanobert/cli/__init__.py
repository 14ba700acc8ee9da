"""What does each command do? The parser and one file per command group: each command parses its
arguments, calls one library function and prints.
"""

from nanobert.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
