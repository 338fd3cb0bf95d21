"""The web chat page's features beyond a plain turn, in headless Chromium against a real
server on the fake engine: answers that stop or fail are kept (with their stats) and can
be continued; edits and regenerations are versions to move between; code is
highlighted with a label and a copy button, math is typeset, tables have a grid; the
view follows a stream only while the reader is at the bottom; a long answer is
appended, never redrawn; Esc stops; the context policy meets a full context; the
conversation list lives on the server (search, rename, delete, import); models load
with a context length and eject; files attach, a PDF as its text (pdf.js loaded only
then); a stopped server and a refused key are
said so; axe-core finds nothing serious in light, dark and at 390×844."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from parlance.core.events import Finish, FinishReason, Usage
from parlance.engines.fake import FakeEngine, Generated
from tests.support.browser import emulate, serious_violations, until
from tests.support.fake_app import FAKE_SPEC
from tests.support.live_server import ServerThread
from tests.support.pdf_files import encrypted_pdf, scanned_pdf, text_pdf
from tests.support.scripted_models import COLD, GatedLoader, ThreadGate
from tests.support.web_server import serving

pytestmark = pytest.mark.browser

FAKE = FAKE_SPEC.id
RICH = ("Here is code:\n\n```python\ndef tide(n):\n    return n + 1\n```\n\n"
        "Energy: $E = mc^2$, and\n\n$$\\int_0^1 x\\,dx = \\tfrac12$$\n\n"
        "| wave | height |\n|---|---|\n| one | 2 m |\n| two | 3 m |\n")




def answer(engine: FakeEngine, text: str, *pauses: object) -> None:
    engine.enqueue(*pauses, Generated(text), Finish(FinishReason.STOP), Usage(5, 7))


def idle(browser, count: int) -> None:
    browser.wait("document.body.dataset.state === 'idle' && "
                 f"document.querySelectorAll('.message.assistant .stats').length === {count}",
                 f"{count} finished answer(s)")


def conversations(server: ServerThread) -> list[dict]:
    return httpx.get(server.base_url + "/parlance/conversations").json()["data"]


def test_a_stopped_answer_is_kept_with_its_stats_and_continued(browser, fake_engine):
    never = asyncio.Event()
    fake_engine.enqueue(Generated("The first words"), never, Generated(" never sent"),
                        Finish(FinishReason.STOP), Usage(3, 4))
    fake_engine.enqueue(Generated(" and the rest."), Finish(FinishReason.STOP), Usage(9, 4))
    with serving(fake_engine) as server:
        browser.ready(server.base_url)
        browser.send("Go on.", FAKE)
        until(lambda: browser.answer_text() == "The first words", "the first words")
        browser.js("document.getElementById('stop').click();")
        idle(browser, 1)
        until(lambda: conversations(server), "the conversation kept")
        kept = httpx.get(f"{server.base_url}/parlance/conversations/"
                         f"{conversations(server)[0]['id']}").json()
        browser.ready(server.base_url)  # a reload: the list comes from the server
        browser.js("document.querySelector('#conversations .open').click();")
        browser.wait("document.querySelector('.message.assistant .stats')", "the answer")
        reopened = browser.last_answer()
        browser.js("[...document.querySelectorAll('.actions button')]"
                   ".find((b) => b.textContent === 'Continue').click();")
        browser.wait("document.body.dataset.state === 'idle' && "
                     "document.querySelector('.message.assistant .markdown')"
                     ".textContent.includes('the rest')", "the continued answer")
        browser.screenshot("continued")
        continued = browser.answer_text()
        request = fake_engine.requests[-1]
    stopped = [m for m in kept["messages"] if m["role"] == "assistant"][0]
    assert stopped["status"] == "stopped" and stopped["text"] == "The first words"
    assert stopped["stats"]["ttft"] is not None
    assert "stopped" in reopened and "TTFT" in reopened
    assert continued == "The first words and the rest."
    assert request.continue_final  # the partial answer was continued, not resent


def test_edits_and_regenerations_are_versions_to_move_between(browser, fake_engine):
    answer(fake_engine, "First answer.")
    answer(fake_engine, "Second answer.")
    answer(fake_engine, "Answer to the edit.")
    with serving(fake_engine) as server:
        browser.ready(server.base_url)
        browser.send("Hello", FAKE)
        idle(browser, 1)
        click = ("[...document.querySelectorAll(arguments[0] + ' .actions button')]"
                 ".find((b) => b.textContent === arguments[1]).click();")
        browser.js(click, ".message.assistant", "Regenerate")
        browser.wait("document.body.dataset.state === 'idle' && "
                     "document.querySelector('.message.assistant .place')", "two versions")
        second = (browser.answer_text(), browser.js(
            "return document.querySelector('.message.assistant .place').textContent;"))
        browser.js(click, ".message.assistant", "‹")
        first = browser.answer_text()
        browser.js(click, ".message.user", "Edit")
        browser.js("const area = document.querySelector('.editor textarea');"
                   "area.value = 'Hello again'; area.form.requestSubmit();")
        browser.wait("document.body.dataset.state === 'idle' && "
                     "document.querySelector('.message.user .place')", "the edit's answer")
        edited = (browser.js("return document.querySelector('.message.user .body').textContent"),
                  browser.js("return document.querySelector('.message.user .place').textContent"),
                  browser.answer_text())
        browser.screenshot("versions")
    assert second == ("Second answer.", "2 / 2")
    assert first == "First answer."
    assert edited == ("Hello again", "2 / 2", "Answer to the edit.")


def test_code_math_and_tables_are_drawn(browser, fake_engine):
    answer(fake_engine, RICH)
    with serving(fake_engine) as server:
        browser.ready(server.base_url)
        browser.send("Show me.", FAKE)
        idle(browser, 1)
        browser.wait("window.katex && document.querySelector('.katex')", "typeset math")
        drawn = browser.js("""
            const answer = document.querySelector('.message.assistant');
            const cell = answer.querySelector('td');
            return {keywords: answer.querySelectorAll('pre code .hljs-keyword').length,
                    bar: answer.querySelector('.code-bar').innerText,
                    math: answer.querySelectorAll('.katex').length,
                    display: answer.querySelectorAll('.katex-display').length,
                    border: getComputedStyle(cell).borderTopWidth};""")
        browser.js("document.querySelector('.copy-code').click();")
        copied = browser.wait("document.querySelector('.copy-code').textContent === 'Copied'",
                              "the copy acknowledged")
        browser.screenshot("code-math-table")
        errors = browser.console_errors()
    assert drawn["keywords"] >= 2 and "python" in drawn["bar"] and "Copy" in drawn["bar"]
    assert drawn["math"] == 2 and drawn["display"] == 1
    assert drawn["border"] == "1px" and copied
    assert errors == []


def test_the_view_follows_only_a_reader_at_the_bottom(browser, fake_engine):
    gate = ThreadGate()
    lines = "".join(f"- line {n}\n" for n in range(200))
    fake_engine.enqueue(Generated(lines), gate, Generated(lines), Finish(FinishReason.STOP),
                        Usage(5, 400))
    with serving(fake_engine) as server:
        browser.ready(server.base_url)
        browser.send("Many lines.", FAKE)
        browser.wait("document.querySelectorAll('.message.assistant li').length >= 200",
                     "the first lines")
        browser.js("const m = document.getElementById('messages'); m.scrollTop = 0;"
                   "m.dispatchEvent(new Event('scroll'));")
        gate.open()
        idle(browser, 1)
        after = browser.js("return [document.getElementById('messages').scrollTop, "
                           "document.getElementById('jump').hidden];")
        browser.js("document.getElementById('jump').click();")
        bottom = browser.js("const m = document.getElementById('messages');"
                            "return m.scrollHeight - m.scrollTop - m.clientHeight;")
    assert after == [0, False]  # left where the reader put it, with a way back
    assert bottom <= 48


def test_a_long_answer_is_appended_not_redrawn(browser, fake_engine):
    """A 1,000-line answer streamed in 200 pieces: what is complete is drawn once and
    never replaced; only a short tail is drawn again each frame."""
    pieces = [Generated("".join(f"{n}. item number {n} of the list\n"
                                for n in range(k * 5, k * 5 + 5))) for k in range(200)]
    script = [x for piece in pieces for x in (piece, 0.003)]
    fake_engine.enqueue(*script, Finish(FinishReason.STOP), Usage(5, 6000))
    with serving(fake_engine) as server:
        browser.ready(server.base_url)
        browser.js("""
            window.redrawn = 0; window.longestTail = 0;
            new MutationObserver((records) => {
              for (const r of records) {
                for (const n of r.removedNodes) {
                  if (n.nodeType === 1 && n.classList.contains('block')) window.redrawn++;
                }
              }
              const tail = document.querySelector('.message.assistant .tail');
              if (tail) window.longestTail = Math.max(window.longestTail, tail.textContent.length);
            }).observe(document.getElementById('messages'), {subtree: true, childList: true});""")
        browser.send("A long list.", FAKE)
        idle(browser, 1)
        seen = browser.js("return {redrawn: window.redrawn, tail: window.longestTail, "
                          "items: document.querySelectorAll('.message.assistant li').length};")
    assert seen["items"] == 1000
    assert seen["redrawn"] == 0 and seen["tail"] < 4000


def test_escape_stops_the_answer(browser, fake_engine):
    never = asyncio.Event()
    fake_engine.enqueue(Generated("Some words"), never, Finish(FinishReason.STOP), Usage(3, 4))
    with serving(fake_engine) as server:
        browser.ready(server.base_url)
        browser.send("Go on for ever.", FAKE)
        until(lambda: browser.answer_text() == "Some words", "the first words")
        browser.js("document.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape'}));")
        idle(browser, 1)
        generation = fake_engine.generations[-1]
        until(lambda: generation.cancelled, "the generation cancelled")
    assert "stopped" in browser.last_answer()


@pytest.mark.parametrize("policy", ["rolling", "middle", "compact", "stop"])
def test_a_full_context_is_met_by_the_conversations_policy(browser, policy):
    """Two turns of 700 words in a context of 1,300 tokens: the second does not fit
    beside the first (a compaction's 512-token summary does beside the first alone)."""
    engine = FakeEngine(context_length=1300, default_reply="Short reply.")
    long = " ".join(["word"] * 700)
    with serving(engine) as server:
        browser.ready(server.base_url)
        browser.js("document.getElementById('context-policy').value = arguments[0];"
                   "document.getElementById('settings').dispatchEvent(new Event('change'));",
                   policy)
        turns = ["Hello.", long, "And " + long] if policy == "middle" else [long, "And " + long]
        for turn in turns[:-1]:
            browser.send(turn, FAKE)
            idle(browser, turns.index(turn) + 1)
        browser.send(turns[-1], FAKE)
        browser.wait("document.body.dataset.state === 'idle' && "
                     "(document.querySelectorAll('.message.assistant .stats').length === "
                     f"{len(turns)} || !document.getElementById('error').hidden)",
                     "the last turn's end")
        error = browser.js("return document.getElementById('error').hidden ? '' : "
                           "document.getElementById('error').textContent;")
        answers = browser.js("return document.querySelectorAll('.message.assistant .stats')"
                             ".length;")
        last = browser.last_answer()
    if policy == "stop":  # the refused turn is kept, failed, with the reason
        assert "context is full" in error and answers == 2 and "failed" in last
    else:
        assert error == "" and answers == len(turns) and "Short reply." in last


def test_conversations_live_on_the_server(browser, fake_engine, tmp_path):
    with serving(fake_engine) as server:
        for title in ("Tides of March", "Mountains"):
            httpx.post(server.base_url + "/parlance/conversations", json={
                "title": title, "messages": [
                    {"id": "u", "parent": None, "role": "user", "text": f"About {title}"}]})
        browser.ready(server.base_url)
        browser.wait("document.querySelectorAll('#conversations li').length === 2", "the list")
        browser.js("const s = document.getElementById('search'); s.value = 'tides';"
                   "s.dispatchEvent(new Event('input'));")
        browser.wait("document.querySelectorAll('#conversations li').length === 1", "a search")
        browser.js("window.prompt = () => 'Spring tides';"
                   "document.querySelector('#conversations .rename').click();")
        browser.wait("document.getElementById('conversations').innerText.includes('Spring')",
                     "the new name")
        browser.js("window.confirm = () => true;"
                   "document.querySelector('#conversations .forget').click();")
        browser.wait("document.querySelectorAll('#conversations li').length === 0", "deleted")
        exported = tmp_path / "export.json"
        exported.write_text(json.dumps({"conversations": [{"title": "Imported", "messages": [
            {"id": "u", "parent": None, "role": "user", "text": "From a file"}]}]}))
        browser.js("const s = document.getElementById('search'); s.value = '';"
                   "s.dispatchEvent(new Event('input'));")
        browser.driver.find_element("id", "import").send_keys(str(exported))
        browser.wait("document.getElementById('conversations').innerText.includes('Imported')",
                     "the import")
        titles = sorted(c["title"] for c in conversations(server))
    assert titles == ["Imported", "Mountains"]


class ContextLoader(GatedLoader):
    """Loads fake engines with the context length the load asked for."""

    def __call__(self, spec: object, options: object, on_progress: object) -> FakeEngine:
        self.report(on_progress)
        return FakeEngine(context_length=getattr(options, "context_length", None) or 2048)


def test_a_model_loads_with_a_context_length_and_ejects(browser, fake_engine):
    loader = ContextLoader(FakeEngine)
    loader.gate.set()
    with serving(fake_engine, loader) as server:
        browser.ready(server.base_url)
        browser.js("const s = document.getElementById('model'); s.value = arguments[0];"
                   "s.dispatchEvent(new Event('change'));"
                   "document.getElementById('context-length').value = '1024';"
                   "document.getElementById('load-model').click();", COLD.id)
        loaded = browser.wait("document.getElementById('model-state').textContent"
                              ".startsWith('loaded') && "
                              "document.getElementById('model-state').textContent", "the load")
        browser.js("document.getElementById('eject-model').click();")
        ejected = browser.wait("document.getElementById('model-state').textContent"
                               ".startsWith('not loaded')", "the eject")
    assert "context 1,024" in loaded and ejected


def test_files_attach_and_an_image_is_refused(browser, fake_engine, tmp_path):
    answer(fake_engine, "Read it.")
    notes = tmp_path / "notes.txt"
    notes.write_text("The secret is 42.")
    picture = tmp_path / "photo.png"
    picture.write_bytes(b"\x89PNG\r\n\x1a\n")
    with serving(fake_engine) as server:
        browser.ready(server.base_url)
        browser.driver.find_element("id", "attach").send_keys(str(notes))
        browser.wait("document.getElementById('attached').innerText.includes('notes.txt')",
                     "the attachment")
        browser.driver.find_element("id", "attach").send_keys(str(picture))
        refused = browser.wait("!document.getElementById('error').hidden && "
                               "document.getElementById('error').textContent", "a refusal")
        browser.send("What does it say?", FAKE)
        idle(browser, 1)
        sent = fake_engine.requests[-1].prompts[0].messages[-1].content
    assert "photo.png" in refused and "no image input" in refused
    assert "The secret is 42." in sent and 'name="notes.txt"' in sent


PDF_LOADED = ("performance.getEntriesByType('resource')"
              ".some((entry) => entry.name.endsWith('/pdf.min.mjs'))")


def attach(browser, path) -> str:
    """Attaches `path`; the page's error once it is read ('' when there is none)."""
    before = browser.js("document.getElementById('error').textContent = '';"
                        "return document.querySelectorAll('#attached li:not(.reading)').length;")
    browser.driver.find_element("id", "attach").send_keys(str(path))
    return browser.wait("!document.querySelector('#attached .reading') && "
                        "(document.getElementById('error').textContent || "
                        " (document.querySelectorAll('#attached li').length > arguments[0]"
                        "  && ' '))", "the file read", before)


def test_a_pdfs_text_goes_into_the_message_page_by_page(browser, tmp_path):
    engine = FakeEngine(context_length=16384)  # room for 300 pages of one line
    answer(engine, "Read it.")
    report = tmp_path / "tides (2026).pdf"
    report.write_bytes(text_pdf(["Spring tides reach 4.2 m (at Brest)."],
                                ["Neap tides: 1.9 m."]))
    long = tmp_path / "long.pdf"
    long.write_bytes(text_pdf(*[[f"Line of page {n}."] for n in range(1, 303)]))
    with serving(engine) as server:
        browser.ready(server.base_url)
        loaded_first = browser.js(f"return {PDF_LOADED};")
        assert attach(browser, report).strip() == ""
        assert attach(browser, long).strip() == ""
        chips = browser.js("return document.getElementById('attached').innerText;")
        announced = browser.js("return document.getElementById('announce').textContent;")
        browser.send("What do they say?", FAKE)
        idle(browser, 1)
        shown = browser.js("return document.querySelector('.message.user').innerText;")
        sent = engine.requests[-1].prompts[0].messages[-1].content
        policy_errors = [e for e in browser.console_errors() if "Content Security" in e]
    assert not loaded_first  # pdf.js comes only with a PDF
    assert 'name="tides (2026).pdf"' in sent
    assert "[Page 1 of 2]\nSpring tides reach 4.2 m (at Brest)." in sent
    assert "[Page 2 of 2]\nNeap tides: 1.9 m." in sent
    assert "[Page 300 of 302]\nLine of page 300." in sent and "page 301" not in sent
    assert "[Not read: only the first 300 of its 302 pages were read.]" in sent
    assert "300 of its 302 pages" in chips and "300 of its 302 pages" in announced
    assert "300 of its 302 pages" in shown
    assert policy_errors == []


def test_a_pdf_is_read_up_to_its_character_bound(browser, fake_engine, tmp_path):
    line = "Waves " * 10  # inside the page's width: pdf.js reads what is on the page
    book = tmp_path / "book.pdf"
    book.write_bytes(text_pdf(*[[f"{n:03} {line}"] * 40 for n in range(1, 101)]))  # 256,000
    with serving(fake_engine) as server:
        browser.ready(server.base_url)
        assert attach(browser, book).strip() == ""
        chips = browser.js("return document.getElementById('attached').innerText;")
        violations = serious_violations(browser)
        try:
            emulate(browser, dark=True)
            violations += serious_violations(browser)
        finally:
            emulate(browser)
    assert "only 200,000 characters were read, up to page " in chips and " of 100)" in chips
    assert violations == []  # the note, in light and dark


def test_a_pdf_that_cannot_be_read_is_said_so(browser, fake_engine, tmp_path):
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4\nthis was cut off in the download")
    scan = tmp_path / "scan.pdf"
    scan.write_bytes(scanned_pdf())
    locked = tmp_path / "locked.pdf"
    locked.write_bytes(encrypted_pdf())
    picture = tmp_path / "photo.png"
    picture.write_bytes(b"\x89PNG\r\n\x1a\n")
    with serving(fake_engine) as server:
        browser.ready(server.base_url)
        said = {path.name: attach(browser, path) for path in (broken, scan, locked, picture)}
        attached = browser.js("return document.getElementById('attached').children.length;")
    assert "broken.pdf could not be read as a PDF" in said["broken.pdf"]
    assert "scan.pdf has no text to read" in said["scan.pdf"]
    assert "locked.pdf is password-protected" in said["locked.pdf"]
    assert "no image input" in said["photo.png"]
    assert attached == 0


def test_a_stopped_server_and_a_refused_key_are_said_so(browser, fake_engine):
    with serving(fake_engine) as server:
        browser.ready(server.base_url)
    browser.js("document.getElementById('new-chat').click();")  # asks the server: none
    shown = browser.wait("!document.getElementById('connection').hidden && "
                         "document.getElementById('connection').textContent", "the banner")
    assert "not answering" in shown
    with serving(fake_engine, api_keys=("right-key",)) as server:
        browser.driver.get(server.base_url + "/")
        browser.js("localStorage.setItem('parlance.apiKey', 'wrong-key');")
        browser.driver.get(server.base_url + "/")
        refused = browser.wait("document.getElementById('key-dialog').open && "
                               "!document.getElementById('key-refused').hidden", "the refusal")
    assert refused


@pytest.mark.parametrize("dark, width, height", [(False, None, None), (True, None, None),
                                                 (False, 390, 844)],
                         ids=["light", "dark", "390x844"])
def test_axe_finds_nothing_serious(browser, fake_engine, dark, width, height):
    answer(fake_engine, RICH)
    try:
        with serving(fake_engine) as server:
            emulate(browser, dark=dark, width=width, height=height)
            browser.ready(server.base_url)
            browser.send("Show me.", FAKE)
            idle(browser, 1)
            browser.wait("document.querySelector('.katex')", "typeset math")
            browser.screenshot(f"axe-{'dark' if dark else 'light'}-{width or 'wide'}")
            violations = serious_violations(browser)
            column = browser.js("return document.getElementById('messages')"
                                ".getBoundingClientRect().width;")
            page = browser.js("return document.documentElement.scrollWidth;")
    finally:
        emulate(browser)
    assert violations == []
    if width:
        assert column >= width - 20 and page <= width  # the chat has the screen
