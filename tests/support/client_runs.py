"""What the client-matrix tests share: running a client's script in its own venv against
a server, and reading back from the server's access log what every request was answered."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).parent.parent / "clients" / "scripts"
RUN_TIMEOUT = 3600  # seconds: dozens of short generations on two busy cores
# the patience `parlance serve` gets for one request in these tests (its default, 120 s,
# is shorter than a structured answer takes on two cores shared with other work)
SERVE_ARGS = ("--request-timeout", "1800")
_ACCESS = re.compile(r"method=(\S+) path=(\S+) status=(\d+)")


def run_script(venv_bin: Path, script: str, base_url: str, *,
               extra: dict[str, str] | None = None) -> dict[str, Any]:
    """Runs `tests/clients/scripts/<script>` with the venv's python; its JSON report.
    `extra`: more environment for the script."""
    run = subprocess.run([str(venv_bin / "python"), str(SCRIPTS / script)],
                         env={"PATH": f"{venv_bin}:/usr/bin:/bin", "PARLANCE_URL": base_url,
                              "HOME": str(venv_bin.parent), "PYTHONDONTWRITEBYTECODE": "1",
                              **(extra or {})},
                         stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=RUN_TIMEOUT)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def answered(log: str) -> list[tuple[str, str, int]]:
    """(method, path, status) of every request the server's access log holds."""
    return [(m, p, int(s)) for m, p, s in _ACCESS.findall(log)]


def assert_all_succeeded(log: str, *, paths: set[str]) -> None:
    """Every request but the health checks went to one of `paths` and got a 2xx, and the
    server logged no exception."""
    requests = [r for r in answered(log) if r[1] != "/health"]
    assert requests, log[-3000:]
    assert {p for _, p, _ in requests} <= paths, (requests, log[-3000:])
    failed = [r for r in requests if not 200 <= r[2] < 300]
    assert not failed, (failed, log[-3000:])
    assert "Traceback" not in log, log[-3000:]


def no_errors(report: dict[str, Any]) -> None:
    """No part of a script's report is an exception the client raised."""
    failed = {name: part["error"] for name, part in report.items() if "error" in part}
    assert not failed, failed
