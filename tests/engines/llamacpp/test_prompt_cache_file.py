"""The prompt cache's file format: a file decodes to the entry it encodes, and one that
is damaged or made for another key is unusable."""

from __future__ import annotations

import pytest

from parlance.engines.llamacpp.prompt_cache_entry import Entry
from parlance.engines.llamacpp.prompt_cache_file import Unusable, decode, encode, key_digest
from tests.support.prompt_cache import FACTS, KEY, entry


def test_a_file_decodes_to_the_entry_it_encodes():
    saved = Entry((5, -1, 70000), b"\x00\x01state")
    back = decode(encode(saved, KEY), KEY)
    assert back.tokens == saved.tokens and back.state == saved.state


@pytest.mark.parametrize("damage", [
    lambda data: data[:-1],  # truncated
    lambda data: data[:10],  # shorter than its header
    lambda data: data[:40] + bytes([data[40] ^ 1]) + data[41:],  # a flipped bit in the key
    lambda data: data[:-40] + bytes([data[-40] ^ 1]) + data[-39:],  # ... in the state
    lambda data: b"X" + data[1:],  # another format
])
def test_a_damaged_file_is_unusable(damage):
    with pytest.raises(Unusable):
        decode(damage(encode(entry(range(20)), KEY)), KEY)


def test_a_file_for_other_facts_is_unusable():
    other = key_digest({**FACTS, "n_ctx_seq": 1024})
    assert other != KEY
    with pytest.raises(Unusable):
        decode(encode(entry(range(20)), other), KEY)
