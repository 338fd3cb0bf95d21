"""The web chat page on the real engine (SmolLM2 on llama.cpp): an answer streams in, and
Stop really stops the generation: `/metrics` shows the request gone and its slot free,
and no token is generated after."""

from __future__ import annotations

import re
import urllib.request

import pytest

from tests.support.browser import until
from tests.support.live_server import ServerThread
from tests.support.real_engine import (
    LONG_CHAT_PROMPT,
    MODEL_ID,
    engine_idle,
    make_app,
    never_ending,
)

pytestmark = [pytest.mark.model, pytest.mark.browser]


def scrape(base_url: str) -> dict[str, float]:
    """This model's samples of `/metrics` by name (without the `parlance_` prefix)."""
    with urllib.request.urlopen(base_url + "/metrics", timeout=60) as response:
        text = response.read().decode()
    pattern = re.compile(r'^parlance_(\w+)\{model="' + re.escape(MODEL_ID) + r'"\} (\S+)$',
                         re.MULTILINE)
    return {name: float(value) for name, value in pattern.findall(text)}


def test_stop_frees_the_slot_on_the_real_engine(browser, real_llama_engine):
    with never_ending(real_llama_engine), ServerThread(
            make_app(real_llama_engine, bind_host="127.0.0.1")) as server:
        browser.ready(server.base_url)
        before = scrape(server.base_url)  # the shared engine's counters include other tests'
        browser.js("document.getElementById('max-tokens').value = '2000';"
                   "document.getElementById('temperature').value = '0';")
        browser.send(LONG_CHAT_PROMPT, MODEL_ID)
        partials: set[str] = set()

        def streaming() -> bool:  # several updates of the answer while it streams
            partials.add(browser.answer_text())
            return len(partials - {""}) >= 3

        until(streaming, "three different partial answers")
        running = scrape(server.base_url)
        browser.screenshot("real-engine-streaming")
        browser.js("document.getElementById('stop').click();")
        browser.wait("document.body.dataset.state === 'idle'", "the stop")
        until(lambda: (m := scrape(server.base_url))["requests_running"] == 0
              and m["slots_in_use"] == 0, "the request gone and its slot free")
        until(lambda: engine_idle(real_llama_engine), "the scheduler idle")
        after = scrape(server.base_url)
        later = scrape(server.base_url)
        browser.screenshot("real-engine-stopped")
    assert running["requests_running"] == 1 and running["slots_in_use"] >= 1
    assert later["tokens_generated_total"] == after["tokens_generated_total"]
    generated = after["tokens_generated_total"] - before["tokens_generated_total"]
    assert generated < 2000  # stopped long before max tokens
    assert "stopped" in browser.last_answer()
