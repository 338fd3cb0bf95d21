"""The Makefile's test stages (what .ci/run runs, in order) hold every test exactly once,
and `make bench` runs every bench with a guard while bench/README.md names the rest.
Read from the files, without running make."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAKEFILE = (ROOT / "Makefile").read_text()
COSTLY = ("model", "clients", "peers", "browser")  # the markers by cost (pyproject.toml)


def stage_markers() -> dict[str, str]:
    """Each `test-*` target's `-m` expression."""
    found = re.findall(r'^(test-\w+): .*\n\t.*pytest -q -m "([^"]+)"', MAKEFILE, re.M)
    return dict(found)


def selects(expression: str, markers: set[str]) -> bool:
    """Whether pytest's `-m expression` selects a test carrying `markers` (the expressions
    here use only marker names, `and`, `or`, `not` and parentheses)."""
    python = re.sub(r"\b(\w+)\b", lambda m: m.group(1) if m.group(1) in ("and", "or", "not")
                    else str(m.group(1) in markers), expression)
    return bool(eval(python, {"__builtins__": {}}))  # only True/False/and/or/not/()


def test_ci_runs_the_stages_cheapest_first():
    run = (ROOT / ".ci" / "run").read_text()
    stages = re.findall(r"^stage (\S+) make (\S+)$", run, re.M)
    assert [target for _, target in stages] == [
        "install", "check", "test-fast", "test-model", "test-clients", "test-peers",
        "test-browser"]
    assert set(stage_markers()) == {target for _, target in stages if target.startswith("test-")}


@pytest.mark.parametrize("markers", [set(c) for n in range(len(COSTLY) + 1)
                                     for c in itertools.combinations(COSTLY, n)])
def test_every_combination_of_cost_markers_is_in_exactly_one_stage(markers):
    chosen = [name for name, expression in stage_markers().items()
              if selects(expression, markers)]
    assert len(chosen) == 1, (markers, chosen)


def test_make_bench_runs_each_guarded_bench_and_the_readme_names_the_others():
    listed = re.search(r"^GUARDED_BENCHES := ((?:.*\\\n)*.*)$", MAKEFILE, re.M)
    assert listed is not None
    in_make = set(listed.group(1).replace("\\\n", " ").split())
    in_make |= set(re.findall(r"bench/(\w+)\.py --quick", MAKEFILE))
    readme = (ROOT / "bench" / "README.md").read_text()
    by_hand = readme.split("The rest are run by hand:")[1].split("The scripts:")[0]
    for script in sorted((ROOT / "bench").glob("*.py")):
        name, text = script.stem, script.read_text()
        guarded = "PASS" in text and "FAIL" in text
        if name in in_make:
            assert guarded, f"bench/{name}.py has no guard (PASS/FAIL) but `make bench` runs it"
            assert f"`{name}" in readme.split("The rest are run by hand:")[0], name
        else:
            assert not guarded, f"bench/{name}.py has a guard: add it to GUARDED_BENCHES"
            assert f"`{name}`" in by_hand, f"bench/README.md: say why {name} is run by hand"
