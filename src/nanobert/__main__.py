"""`python -m nanobert` runs the command-line interface."""

from nanobert.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
