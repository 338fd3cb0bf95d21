"""The `parlance` command: `dispatch.py` the table of subcommands, `serve_flags.py` the serve
flags generated from `config.ServeConfig`, `commands.py` what each subcommand runs,
`wiring.py` the composition root (a `ServeConfig` made into the app), `reference.py`
the flag reference the docs show."""

from parlance.cli.dispatch import main

__all__ = ["main"]
