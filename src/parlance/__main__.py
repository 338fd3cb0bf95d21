"""`python -m parlance` is the same as the `parlance` command."""

from parlance.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
