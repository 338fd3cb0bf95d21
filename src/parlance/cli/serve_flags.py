"""`parlance serve`'s flags, generated from the `ServeConfig` fields that carry a `Flag`
(as vLLM derives its engine flags from dataclasses): a new serve setting is one field,
and its flag, env var, `[serve]` key, help and reference row follow from it.

What the field's type says: a `tuple` is a repeatable flag, a `bool` a switch (a
`bool | None` with `Flag.off` has a `--no-` twin), `int` and `float` are parsed as
such; `Flag.path` parses a path. No flag has an argparse default: a flag not given is
None, so `config.resolve_config` takes the env var, the file or the default."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from parlance.config import Flag, ServeConfig, env_name, flag_of


@dataclass(frozen=True, slots=True)
class ServeFlag:
    """One setting as the command line and the environment see it."""

    name: str  # the field, the `[serve]` key and argparse's dest
    flag: str  # --ctx-size
    env: str  # PARLANCE_CTX_SIZE
    kind: str  # the field's type, as written: "int | None"
    default: Any
    spec: Flag

    @property
    def help(self) -> str:
        """The help text with its default and env var (what `--help` shows)."""
        return f"{self.spec.help} [{self.default_and_env}]"

    @property
    def default_and_env(self) -> str:
        """`default X; env PARLANCE_X` for a flag whose default is a value (the others say
        theirs in words), `env PARLANCE_X` otherwise."""
        env = f"env {self.env}"
        if self.default is False:
            return f"default off; {env}"
        if self.default in (None, "", ()):
            return env
        return f"default {shown(self.default)}; {env}"


def shown(value: Any) -> str:
    """A default as the help shows it (10.0 as 10, 21600.0 as 21600)."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def serve_flags(config: type[ServeConfig] = ServeConfig) -> Iterator[ServeFlag]:
    """Each setting of `config` that is a flag, in the order of its fields."""
    for item in fields(config):
        spec = flag_of(item)
        if spec is not None:
            yield ServeFlag(item.name, "--" + item.name.replace("_", "-"), env_name(item.name),
                            str(item.type), item.default, spec)


def add_serve_flags(parser: argparse.ArgumentParser,
                    config: type[ServeConfig] = ServeConfig) -> None:
    """Every flag of `config` on `parser`."""
    for flag in serve_flags(config):
        spec, kind = flag.spec, flag.kind
        if "bool" in kind:
            parser.add_argument(flag.flag, dest=flag.name, action="store_const", const=True,
                                help=flag.help)
            if spec.off is not None:
                off = ServeFlag(flag.name, flag.flag, flag.env, kind, flag.default,
                                Flag(spec.off))
                parser.add_argument("--no-" + flag.flag.removeprefix("--"), dest=flag.name,
                                    action="store_const", const=False, help=off.help)
            continue
        options: dict[str, Any] = {"dest": flag.name, "help": flag.help}
        if "tuple" in kind:
            options["action"] = "append"
        if spec.path:
            options["type"] = Path
        elif "int" in kind:
            options["type"] = int
        elif "float" in kind:
            options["type"] = float
        if spec.choices:
            options["choices"] = spec.choices
        if spec.metavar is not None:
            options["metavar"] = spec.metavar
        parser.add_argument(flag.flag, **options)
