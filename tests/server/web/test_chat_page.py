"""The web chat page in headless Chromium against a real server on the fake engine:
an answer streams, Stop stops it, reasoning and a tool call are drawn, a call to the
operator's MCP server with its result, a cold model's load shows a progress bar, so
does a prompt being evaluated, model output cannot run script, a key is asked for, and
a conversation is kept by the server and opened again. Each state is saved as a
screenshot under the directory the run prints (`$PARLANCE_ARTIFACTS`, else
`tests/.artifacts/`)."""

from __future__ import annotations

import asyncio

import pytest

from parlance.core.events import (
    Finish,
    FinishReason,
    PromptProgress,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from parlance.engines.fake import FakeEngine, Generated
from parlance.integrations.settings import ConfiguredServer, IntegrationSettings
from tests.support.browser import until
from tests.support.fake_app import FAKE_SPEC
from tests.support.scripted_models import COLD, GatedLoader, ThreadGate
from tests.support.web_server import serving

pytestmark = pytest.mark.browser

ANSWER = "Tides come and go; the shore keeps count of every wave."
FAKE = FAKE_SPEC.id
STREAMED = [Generated(w if i == 0 else " " + w) for i, w in enumerate(ANSWER.split(" "))]




def slowly(items: list, pause: float = 0.05) -> list:
    return [x for item in items for x in (item, pause)]


def test_an_answer_streams_into_the_page(browser, fake_engine):
    fake_engine.enqueue(*slowly(STREAMED), Finish(FinishReason.STOP), Usage(6, len(STREAMED)))
    with serving(fake_engine) as server:
        browser.ready(server.base_url)
        browser.js("""
            window.seen = new Set();
            new MutationObserver(() => {
              const body = document.querySelector('.message.assistant .markdown');
              if (body) window.seen.add(body.textContent);
            }).observe(document.getElementById('messages'),
                       {subtree: true, childList: true, characterData: true});""")
        browser.send("Write about the sea.", FAKE)
        browser.answered()
        partial = browser.js("return [...window.seen];")
        browser.screenshot("streamed")
    assert len(partial) >= 3, partial  # drawn as it came, not at the end
    assert all(ANSWER.startswith(p.strip()) for p in partial)
    text = browser.last_answer()
    assert ANSWER in text and f"{len(STREAMED)} tokens" in text and "TTFT" in text
    assert "Write about the sea." in browser.js(
        "return document.querySelector('.message.user').textContent;")
    assert browser.console_errors() == []


def test_stop_ends_the_generation_on_the_server(browser, fake_engine):
    never = asyncio.Event()  # the model would go on for ever
    fake_engine.enqueue(Generated("The first words"), never, Generated(" never sent"),
                   Finish(FinishReason.STOP), Usage(3, 4))
    with serving(fake_engine) as server:
        browser.ready(server.base_url)
        browser.send("Go on for ever.", FAKE)
        until(lambda: browser.answer_text() == "The first words", "the first words shown")
        browser.screenshot("before-stop")
        browser.js("document.getElementById('stop').click();")
        browser.wait("document.body.dataset.state === 'idle'", "the stop")
        browser.screenshot("stopped")
        generation = fake_engine.generations[-1]
        until(lambda: generation.cancelled, "the server cancelled the generation")
    assert not generation.finished and "never sent" not in browser.last_answer()
    assert "stopped" in browser.last_answer()


def test_reasoning_and_a_tool_call_are_drawn(browser, fake_engine):
    fake_engine.enqueue(*slowly([Generated("<think>The person wants the weather"),
                            Generated(" in Paris.</think>")]),
                   ToolCallStart("call_1", "get_weather"), ToolCallArgs('{"city": '),
                   0.05, ToolCallArgs('"Paris"}'), ToolCallEnd(),
                   Finish(FinishReason.TOOL_CALLS), Usage(12, 9))
    with serving(fake_engine) as server:
        browser.ready(server.base_url)
        browser.send("Weather in Paris?", FAKE)
        browser.answered()
        browser.screenshot("reasoning-and-tool-call")
        reasoning = browser.js("return document.querySelector('details.reasoning').textContent;")
        call = browser.js("return document.querySelector('details.tool-call').innerText;")
    assert "Thought for" in reasoning and "the weather in Paris." in reasoning
    assert "get_weather" in call and '"city": "Paris"' in call


def test_a_call_to_the_operators_mcp_server_shows_its_result(browser, fake_engine, mcp):
    fake_engine.enqueue(Generated('<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}'
                                  '\n</tool_call>'), Finish(FinishReason.STOP), Usage(10, 12))
    fake_engine.enqueue(Generated("The sum is 5."), Finish(FinishReason.STOP), Usage(30, 5))
    tools = IntegrationSettings(configured={"calc": ConfiguredServer("calc", url=mcp.url)})
    with serving(fake_engine, integrations=tools) as server:
        browser.ready(server.base_url)
        browser.js("document.getElementById('mcp').value = 'calc';")
        browser.send("What is 2 + 3?", FAKE)
        browser.answered()
        browser.screenshot("mcp-call")
        call = browser.js("return document.querySelector('details.tool-call').innerText;")
    assert "Tool call: add on calc" in call and '"a": 2' in call
    assert '"text":"5"' in call  # the server's result, as the MCP server sent it
    assert "The sum is 5." in browser.last_answer()


def test_a_cold_model_loads_with_a_progress_bar(browser, fake_engine):
    loader = GatedLoader(lambda: FakeEngine(default_reply="Loaded and ready."))
    with serving(fake_engine, loader) as server:
        browser.ready(server.base_url)
        assert COLD.id in browser.js(
            "return document.getElementById('model').innerText;")
        browser.send("Hello?", COLD.id)
        assert loader.halfway.wait(120)
        shown = browser.wait("!document.getElementById('load').hidden && "
                             "document.getElementById('load-bar').value", "the load's progress")
        label = browser.js("return document.getElementById('load').innerText;")
        browser.screenshot("model-loading")
        loader.gate.set()
        browser.answered()
        browser.wait("document.getElementById('model').selectedOptions[0].textContent"
                     ".includes('(loaded)')", "the model listed as loaded")
        browser.screenshot("model-loaded")
    assert 0 < shown < 1 and f"Loading {COLD.id}" in label
    assert "Loaded and ready." in browser.last_answer()
    assert browser.js("return document.getElementById('load').hidden;")


PROMPT_BAR = """(() => {
  const all = document.querySelectorAll('.message.assistant');
  const waiting = all.length && all[all.length - 1].querySelector('.waiting');
  const bar = waiting && waiting.querySelector('progress');
  return bar && bar.value === arguments[0]
    && {value: bar.value, max: bar.max, label: waiting.innerText};
})()"""


def test_a_prompt_being_evaluated_shows_a_progress_bar(browser, fake_engine):
    quarter, three_quarters = ThreadGate(), ThreadGate()
    fake_engine.enqueue(PromptProgress(256, 1024), quarter, PromptProgress(768, 1024),
                        three_quarters, PromptProgress(1024, 1024), *STREAMED,
                        Finish(FinishReason.STOP),
                        Usage(1024, len(STREAMED)))
    with serving(fake_engine) as server:
        browser.ready(server.base_url)
        browser.send("Summarise this long document.", FAKE)
        seen = [browser.wait(PROMPT_BAR, "a quarter of the prompt evaluated", 256)]
        browser.screenshot("prompt-processing")
        quarter.open()
        seen.append(browser.wait(PROMPT_BAR, "three quarters evaluated", 768))
        three_quarters.open()
        browser.answered()
        left = browser.js("return document.querySelectorAll('.message .waiting').length;")
    assert [(s["value"], s["max"]) for s in seen] == [(256, 1024), (768, 1024)]
    assert "25% (256 of 1024 tokens)" in seen[0]["label"]
    assert "75% (768 of 1024 tokens)" in seen[1]["label"]
    assert left == 0 and ANSWER in browser.last_answer()
    assert browser.console_errors() == []


XSS = ('Look: <img src=x onerror="window.pwned=1"> <script>window.pwned=2</script> '
       '[a link](javascript:window.pwned=3) <a href="javascript:window.pwned=4">another</a> '
       '<svg onload="window.pwned=5"></svg> <iframe src="javascript:window.pwned=6"></iframe> '
       '<b onmouseover="window.pwned=7">bold</b>\n\n```html\n<script>alert(1)</script>\n```')


def test_model_output_cannot_run_script(browser, fake_engine):
    fake_engine.enqueue(Generated(XSS), Finish(FinishReason.STOP), Usage(3, 40))
    with serving(fake_engine) as server:
        browser.ready(server.base_url)
        browser.send("Try it.", FAKE)
        browser.answered()
        for link in browser.driver.find_elements("css selector", ".message.assistant a"):
            link.click()
        browser.driver.find_element("css selector", ".message.assistant .markdown").click()
        browser.screenshot("xss-inert")
        pwned = browser.js("return window.pwned;")
        found = browser.js("""
            const answer = document.querySelector('.message.assistant');
            return {
              scripts: answer.querySelectorAll('script, iframe, svg').length,
              handlers: [...answer.querySelectorAll('*')].flatMap(
                  (e) => [...e.attributes].map((a) => a.name)).filter((n) => n.startsWith('on')),
              hrefs: [...answer.querySelectorAll('a')].map((a) => a.getAttribute('href')),
              code: answer.querySelector('pre code').textContent,
              text: answer.querySelector('.markdown').textContent,
            };""")
        windows = len(browser.driver.window_handles)
        # the second wall: markup that got past a sanitizer still runs no inline script
        browser.js("document.getElementById('messages').insertAdjacentHTML('beforeend', "
                   "'<img src=\"data:,\" onerror=\"window.pwned=8\" onload=\"window.pwned=9\">"
                   "<a id=\"bad\" href=\"javascript:window.pwned=10\">bad</a>');")
        browser.driver.find_element("id", "bad").click()
        csp = browser.js("return window.pwned;")
    assert pwned is None and csp is None
    assert found["scripts"] == 0 and found["handlers"] == []
    assert all(h is None or not h.lower().startswith("javascript") for h in found["hrefs"])
    assert "<script>alert(1)</script>" in found["code"]  # shown as text, not run
    assert '<b onmouseover="window.pwned=7">bold</b>' in found["text"]  # a model's HTML is text
    assert windows == 1


def test_the_page_asks_for_the_key_and_keeps_it_in_the_browser(browser, fake_engine):
    with serving(fake_engine, api_keys=("sk-test-key",)) as server:
        browser.open(server.base_url + "/")
        browser.wait("document.getElementById('key-dialog').open", "the key prompt")
        browser.screenshot("key-prompt")
        browser.driver.find_element("id", "key").send_keys("sk-test-key")
        browser.js("document.getElementById('key-form').requestSubmit();")
        browser.wait("document.getElementById('model').options.length > 0", "the model list")
        browser.send("Hi", FAKE)
        browser.answered()
        kept = browser.js("return localStorage.getItem('parlance.apiKey');")
    assert kept == "sk-test-key"
    assert "Hello there!" in browser.last_answer()


def test_a_conversation_is_kept_by_the_server_and_opened_again(browser, fake_engine):
    fake_engine.enqueue(Generated("<think>A short answer will do.</think>A **haiku** about the "
                             "sea:\n\n- waves fold into foam\n- the tide keeps its own "
                             "hours\n- salt on the wind\n\n```python\nprint(\"tide\")\n```"),
                   Finish(FinishReason.STOP), Usage(9, 30))
    fake_engine.enqueue(Generated("Yes: it was about the sea."), Finish(FinishReason.STOP),
                   Usage(30, 8))
    with serving(fake_engine) as server:
        browser.ready(server.base_url)
        browser.js("document.getElementById('system').value = 'You are a poet.';")
        browser.send("A haiku about the sea, please.", FAKE)
        browser.answered()
        browser.send("Was it about the sea?", FAKE)
        browser.wait("document.querySelectorAll('.message.assistant .stats').length === 2 && "
                     "document.body.dataset.state === 'idle'", "the second answer")
        browser.screenshot("conversation")
        second = fake_engine.requests[-1].prompts[0]
        browser.js("document.getElementById('new-chat').click();")
        assert browser.js("return document.querySelectorAll('.message').length;") == 0
        browser.js("document.querySelector('#conversations .open').click();")
        browser.wait("document.querySelectorAll('.message').length === 4", "the conversation")
        browser.js("document.querySelector('details.reasoning').open = true;")
        browser.screenshot("readme")
        shown = browser.js("return document.getElementById('messages').innerText;")
        listed = browser.js("return document.getElementById('conversations').innerText;")
    words = [m.content for m in second.messages]  # the second turn continued the first
    assert "A haiku about the sea, please." in words and "Was it about the sea?" in words
    assert second.messages[0].role == "system" and second.messages[0].content == "You are a poet."
    assert "A haiku about the sea, please." in listed
    for part in ("A haiku about the sea, please.", "waves fold into foam", 'print("tide")',
                 "Was it about the sea?", "Yes: it was about the sea.", "A short answer"):
        assert part in shown
