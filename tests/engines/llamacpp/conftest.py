"""The engine-level tests call the shared real engine (see tests/conftest.py) `engine`."""

from __future__ import annotations

import pytest


@pytest.fixture
def engine(llama):
    return llama
