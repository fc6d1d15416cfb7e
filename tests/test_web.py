"""The page of `mdrag serve` in a real Chromium (the distribution's, driven by Selenium), against a
real `mdrag serve examples/docs` on 127.0.0.1 with the real MiniLM model and the loopback fake LLM
(the loading state: a QAServer in a thread whose embedder waits for the test).

Skipped when Chromium or its driver is missing (`.ci/run` installs them: `apt-get install chromium
chromium-driver`). Set MDRAG_SCREENSHOT=docs/web.png to write the README's screenshot.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from mdrag.config import load_config
from mdrag.frontends.server import QAServer
from mdrag.index import Index
from tests.conftest import HashEmbedder, listening
from tests.fake_llm import FakeServer, Handler, Script, is_rewrite, serving

REPO = Path(__file__).resolve().parents[1]
FOREIGN = "foreign.example"  # a name the browser maps to 127.0.0.1: a page of another origin

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[dev]')")
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.remote.webelement import WebElement  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = pytest.mark.slow


def _which(*names: str) -> str | None:
    return next((p for p in map(shutil.which, names) if p), None)


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    chromium = _which("chromium", "chromium-browser", "google-chrome")
    driver = _which("chromedriver")
    if not chromium or not driver:
        pytest.skip("Chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--window-size=1000,900",
        f"--host-resolver-rules=MAP {FOREIGN} 127.0.0.1",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console: script errors, CSP reports
    drv = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver))
    try:
        yield drv
    finally:
        drv.quit()


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[FakeServer]:
    with serving(Handler, Script()) as server:
        yield server


@pytest.fixture
def script(fake_llm: FakeServer) -> Iterator[Script]:
    """A fresh script for the fake LLM for each test."""
    fake_llm.script = Script()
    yield fake_llm.script
    fake_llm.script.stop.set()


def _serve(home: Path, folder: Path, llm_url: str | None, *flags: str) -> AbstractContextManager[int]:
    """Run `mdrag serve folder` with its own home (and the LLM at ``llm_url``); the block gets its port."""
    home.mkdir(parents=True, exist_ok=True)
    if llm_url:
        config = {"llm": {"base_url": llm_url, "api_key": "sk-test", "model": "test-model"}}
        (home / "config.yaml").write_text(yaml.safe_dump(config))
    unset = [k for k in os.environ if k.startswith("MARKDOWN_QA_") or k.lower().endswith("_proxy")]
    env = ["env", *(f"-u{k}" for k in unset), f"MDRAG_HOME={home}", "HF_HUB_OFFLINE=1", f"PYTHONPATH={REPO}"]

    def argv(port: int) -> list[str]:
        return [*env, sys.executable, "-m", "mdrag", "serve", str(folder), "--port", str(port), *flags]

    def exited(tail: str) -> None:
        pytest.fail(f"mdrag serve exited: {tail}")

    return listening(argv, home / "serve.log", 120, exited)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, fake_llm: FakeServer) -> Iterator[str]:
    """`mdrag serve examples/docs` with the fake LLM; yields the page's address."""
    home = tmp_path_factory.mktemp("web") / "home"
    url = f"http://127.0.0.1:{fake_llm.server_address[1]}/v1"
    with _serve(home, REPO / "examples" / "docs", url) as port:
        yield f"http://127.0.0.1:{port}/"


def wait_for(browser: WebDriver, what: Callable[[WebDriver], Any], why: str, timeout: float = 60) -> Any:
    try:
        return WebDriverWait(browser, timeout, poll_frequency=0.05).until(what)
    except TimeoutException:
        pytest.fail(f"the page never showed {why}; it shows: {browser.find_element(By.TAG_NAME, 'body').text[-1500:]}")


def state(browser: WebDriver) -> str:
    return str(browser.find_element(By.ID, "state").text)


def open_page(browser: WebDriver, url: str) -> None:
    """Open the page in a new tab: its own sessionStorage, so no turns kept by an earlier test."""
    old = browser.current_window_handle
    browser.switch_to.new_window("tab")
    new = browser.current_window_handle
    browser.switch_to.window(old)
    browser.close()
    browser.switch_to.window(new)
    browser.get(url)
    wait_for(browser, lambda b: state(b).startswith("ready:"), "the ready state", 180)


def turns(browser: WebDriver) -> list[WebElement]:
    return list(browser.find_elements(By.CSS_SELECTOR, "#log .turn"))


def ask(browser: WebDriver, text: str) -> WebElement:
    """Type a question and press Enter; the new turn once it has an answer, a note or results."""
    before = len(turns(browser))
    box = browser.find_element(By.ID, "question")
    box.send_keys(text + Keys.ENTER)
    turn = wait_for(browser, lambda b: len(turns(b)) > before and turns(b)[-1], "the question")
    return turn  # type: ignore[no-any-return]


def click(browser: WebDriver, element: WebElement) -> None:
    """Click ``element`` once scrolled to the middle of the window (not under the header at its top, nor under
    the input box at its bottom)."""
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    element.click()


def finished(browser: WebDriver, turn: WebElement) -> None:
    wait_for(browser, lambda b: turn.get_attribute("data-done") is not None, "the end of the answer")


def test_a_question_streams_its_answer_with_sources_that_open_their_passages(
    browser: WebDriver, served: str, script: Script
) -> None:
    script.tokens = [
        "When indexing is **interrupted** (Ctrl+C, a crash), ",
        "run `mdrag index` again: ",
        "it removes half-written chunks ",
        "and finishes the job [1].\n\n",
        "- files already embedded are not embedded again;\n",
        "- an edited file is chunked again [1].\n",
    ]
    script.delay = 0.1  # the answer grows over several frames
    open_page(browser, served)
    assert "files" in state(browser) and "chunks" in state(browser)
    # watch the answer grow: every change of the newest answer's text length, as the page makes it
    browser.execute_script(
        "window.lengths = [];"
        "new MutationObserver(() => { const b = document.querySelector('#log .turn:last-of-type .body');"
        " if (b) window.lengths.push(b.textContent.length); })"
        ".observe(document.getElementById('log'), {childList: true, subtree: true, characterData: true});"
    )
    box = browser.find_element(By.ID, "question")
    box.send_keys("What happens when indexing is interrupted?", Keys.SHIFT, Keys.ENTER, Keys.SHIFT, "In short.")
    assert box.get_attribute("value") == "What happens when indexing is interrupted?\nIn short."  # Shift+Enter
    assert turns(browser) == []
    box.send_keys(Keys.ENTER)
    turn = wait_for(browser, lambda b: turns(b) and turns(b)[-1], "the question")
    finished(browser, turn)
    assert (
        turn.find_element(By.CSS_SELECTOR, ".question").text == "What happens when indexing is interrupted?\nIn short."
    )
    body = turn.find_element(By.CSS_SELECTOR, ".body")
    assert "When indexing is interrupted (Ctrl+C, a crash), run mdrag index again" in body.text
    assert body.find_element(By.CSS_SELECTOR, "strong").text == "interrupted"
    assert body.find_element(By.CSS_SELECTOR, "code").text == "mdrag index"
    assert len(body.find_elements(By.CSS_SELECTOR, "li")) == 2
    lengths = [n for n in browser.execute_script("return window.lengths") if n]
    final = len(body.get_attribute("textContent"))
    partial = {n for n in lengths if n < final}
    assert len(partial) >= 2, f"the answer did not grow in steps: {lengths}"
    # sources: each path once, numbered as the text cites them; [1] opens its passage
    sources = turn.find_elements(By.CSS_SELECTOR, ".sources > li")
    paths = [s.find_element(By.TAG_NAME, "summary").get_attribute("title") for s in sources]
    assert paths and len(paths) == len(set(paths)) and all(p.startswith(str(REPO / "examples" / "docs")) for p in paths)
    assert sources[0].find_element(By.CSS_SELECTOR, ".num").text == "[1]"
    body.find_element(By.CSS_SELECTOR, "a.cite").click()
    passage = wait_for(browser, lambda b: sources[0].find_elements(By.CSS_SELECTOR, ".passage"), "the cited passage")[0]
    where = passage.find_element(By.CSS_SELECTOR, ".where").text
    assert paths[0].endswith(passage.find_element(By.CSS_SELECTOR, ".file").text)
    assert "lines" in where
    assert passage.find_element(By.CSS_SELECTOR, ".text").text.strip()
    # the figures: first text on the page after stream_start reached it, and the page's transfer size
    first_ms = browser.execute_script(
        "const m = n => performance.getEntriesByName(n)[0].startTime;"
        "return m('mdrag:first_text:t1') - m('mdrag:stream_start:t1');"
    )
    transfer = browser.execute_script(
        "return performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource'))"
        ".filter(e => e.name.startsWith(location.origin)).reduce((s, e) => s + e.transferSize, 0);"
    )
    print(f"\nweb page: first answer text {first_ms:.1f} ms after stream_start; page transfer {transfer} bytes")
    shot = os.environ.get("MDRAG_SCREENSHOT")
    if shot:
        browser.set_window_size(900, 860)
        browser.find_element(By.ID, "log").click()
        browser.save_screenshot(shot)
    # no script error and no Content-Security-Policy violation on the way
    assert [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
    # readable at phone width: nothing wider than the screen
    browser.set_window_size(390, 844)
    assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    browser.set_window_size(1000, 900)


def test_no_relevant_information_errors_and_stop(browser: WebDriver, served: str, script: Script) -> None:
    open_page(browser, served)
    # nothing relevant: said as such, without sources, and the LLM is not asked
    turn = ask(browser, "What is the boiling point of liquid nitrogen in kelvin?")
    finished(browser, turn)
    assert "no-info" in turn.get_attribute("class")
    assert turn.find_element(By.CSS_SELECTOR, ".label").text == "No relevant information"
    assert turn.find_elements(By.CSS_SELECTOR, ".sources") == [] and script.requests == []
    # an LLM error is shown in its turn; the conversation stays and goes on
    script.status, script.error_body = 500, b'{"error": {"message": "model overloaded"}}'
    failed = ask(browser, "How do I change the chunk size?")
    note = wait_for(browser, lambda b: failed.find_elements(By.CSS_SELECTOR, ".note.error"), "the error")[0]
    assert note.text.startswith("Error:")
    script.status = 200
    script.tokens = [
        "Hello, world [1]. ",
        "<img src=x onerror=\"document.title='pwned'\"> stays text, ",
        "[so does this](javascript:document.title='pwned').\n\n",
        "| setting | effect |\n|---|---|\n",
        "| `chunk.size` | <b>tokens</b> per chunk |\n",
    ]
    again = ask(browser, "How do I change the chunk size?")
    finished(browser, again)
    assert "Hello, world" in again.text and len(turns(browser)) == 3
    # nothing from the LLM runs: the tag is text, the javascript: link is no link
    body = again.find_element(By.CSS_SELECTOR, ".body")
    assert "<img src=x onerror=\"document.title='pwned'\"> stays text, so does this." in body.text
    assert body.find_elements(By.TAG_NAME, "img") == [] and browser.title == "mdrag"
    cells = [c.text for c in body.find_elements(By.CSS_SELECTOR, "table th, table td")]
    assert cells == ["setting", "effect", "chunk.size", "<b>tokens</b> per chunk"]
    assert body.find_elements(By.TAG_NAME, "b") == []
    assert [a.get_attribute("href") for a in body.find_elements(By.TAG_NAME, "a")] == [f"{served}#t3-src-1"]
    assert "No relevant information" in turns(browser)[0].text and note.is_displayed()
    # Stop: the answer ends, the server closes the LLM request, and the page goes on
    script.tokens, script.delay = ["word "] * 400, 0.05
    stopped = ask(browser, "How do I change the chunk size?")
    wait_for(browser, lambda b: "word" in stopped.text, "the first words")
    browser.find_element(By.ID, "stop").click()
    assert script.disconnected.wait(30), "the LLM request was not closed"
    wait_for(browser, lambda b: stopped.find_elements(By.CSS_SELECTOR, ".note.stopped"), "the stop")
    wait_for(browser, lambda b: state(b).startswith("ready:"), "the ready state after the stop")
    assert not browser.find_element(By.ID, "stop").is_displayed()
    script.tokens, script.delay = ["Done [1]."], 0.0
    last = ask(browser, "How do I change the chunk size?")
    finished(browser, last)
    assert "Done" in last.text


def test_an_answer_the_llm_did_not_finish_is_shown_as_an_error_in_its_turn(
    browser: WebDriver, served: str, script: Script
) -> None:
    """The LLM sends one piece and closes its stream with no finish_reason: the turn keeps the piece and
    ends in an error that says the answer is cut short, instead of a finished answer; the sources it was
    being made from are listed as the passages found."""
    open_page(browser, served)
    script.unfinished = True
    turn = ask(browser, "How do I change the chunk size?")
    finished(browser, turn)
    assert turn.find_element(By.CSS_SELECTOR, ".body").text == "Hel"
    notes = turn.find_elements(By.CSS_SELECTOR, ".note.error")
    assert notes and notes[0].text.startswith("Error: the answer is cut short: "), turn.text
    assert turn.find_element(By.CSS_SELECTOR, ".found").text == "The passages found for this question:"
    assert turn.find_elements(By.CSS_SELECTOR, ".sources > li")


def test_search_only_lists_ranked_passages(browser: WebDriver, served: str, script: Script) -> None:
    open_page(browser, served)
    browser.find_element(By.ID, "search-only").click()
    assert browser.find_element(By.ID, "send").text == "Search"
    turn = ask(browser, "chunk size setting")
    results = wait_for(browser, lambda b: turn.find_elements(By.CSS_SELECTOR, ".results .passage"), "results")
    scores = [float(r.find_element(By.CSS_SELECTOR, ".score").text.split()[-1]) for r in results]
    assert scores == sorted(scores, reverse=True)
    assert any("configuration.md" in r.find_element(By.CSS_SELECTOR, ".file").text for r in results)
    assert script.requests == []


# the newest turn as the reader sees it: the box of `arguments[0]` in it (default: the whole turn), the
# top of the input box that sticks to the bottom of the window, and how far the page is scrolled
VIEW = """
const turn = [...document.querySelectorAll('#log .turn')].pop();
const box = (arguments[0] ? turn.querySelector(arguments[0]) : turn).getBoundingClientRect();
return {top: box.top, bottom: box.bottom, ask: document.getElementById('ask').getBoundingClientRect().top,
        length: turn.querySelector('.body').textContent.length, streaming: turn.classList.contains('streaming'),
        y: window.scrollY};
"""
# VIEW at every change of the newest turn while it streams, in window.views (while it is an array)
WATCH = """
window.views = [];
new MutationObserver(() => {
  const turn = [...document.querySelectorAll('#log .turn')].pop();
  if (!window.views || !turn?.classList.contains('streaming')) return;
  const box = turn.getBoundingClientRect();
  window.views.push({top: box.top, bottom: box.bottom, ask: document.getElementById('ask').getBoundingClientRect().top,
                     length: turn.querySelector('.body').textContent.length});
}).observe(document.getElementById('log'), {childList: true, subtree: true, characterData: true});
"""


def in_view(view: dict[str, float]) -> bool:
    """The box's end is on screen above the input box (the start of a tall one may be above the window)."""
    return 0 < view["bottom"] <= view["ask"] + 1 and view["top"] < view["bottom"]


def test_the_newest_turn_stays_in_view_above_the_input_box(browser: WebDriver, served: str, script: Script) -> None:
    open_page(browser, served)
    browser.set_window_size(480, 640)
    try:
        search_only = browser.find_element(By.ID, "search-only")
        search_only.click()
        for text in ("chunk size setting", "what happens when indexing is interrupted"):
            finished(browser, ask(browser, text))
            assert in_view(browser.execute_script(VIEW))
        search_only.click()
        # a long answer, a paragraph every few sentences, that the reader follows as it streams
        script.tokens = [f"Sentence {i} says a little more about the chunk size [1]. " for i in range(80)]
        script.tokens[4::5] = [t + "\n\n" for t in script.tokens[4::5]]
        script.delay = 0.1
        browser.execute_script(WATCH)
        turn = ask(browser, "How do I change the chunk size?")
        wait_for(browser, lambda b: b.execute_script(VIEW)["length"] > 800, "a good part of the answer")
        views = browser.execute_script("const v = window.views; window.views = null; return v")
        assert len(views) >= 3 and all(map(in_view, views)), views
        # the reader scrolls up: the page leaves them there while the answer grows
        y = browser.execute_script("window.scrollBy(0, -300); return window.scrollY")
        length = browser.execute_script(VIEW)["length"]
        view = wait_for(
            browser, lambda b: (v := b.execute_script(VIEW))["length"] > length + 150 and v, "more of the answer"
        )
        assert abs(view["y"] - y) <= 1 and view["streaming"] and not in_view(view)
        # and back at the end, the page follows the answer again
        browser.execute_script("window.scrollTo(0, document.documentElement.scrollHeight); window.views = []")
        wait_for(browser, lambda b: len(b.execute_script("return window.views")) >= 3, "more of the answer")
        views = browser.execute_script("const v = window.views; window.views = null; return v")
        assert all(map(in_view, views)), views
        finished(browser, turn)
        assert turn.find_elements(By.CSS_SELECTOR, ".sources") and in_view(browser.execute_script(VIEW))
        # an error in the middle of the answer is said on its turn, in view, after the text so far
        script.tokens, script.delay = ["The first part of the answer.\n\n" * 30, "never sent"], 0.0
        script.error_event = "the model crashed"
        failed = ask(browser, "How do I change the chunk size?")
        note = wait_for(browser, lambda b: failed.find_elements(By.CSS_SELECTOR, ".note.error"), "the error")[0]
        assert "the model crashed" in note.text and "never sent" not in failed.text
        assert failed.find_element(By.CSS_SELECTOR, ".body").text.startswith("The first part of the answer.")
        assert in_view(browser.execute_script(VIEW, ".note.error"))
        # a cited source is scrolled into view above the input box, not under it
        box = browser.execute_script(
            "window.scrollTo(0, 0); const a = arguments[0]; a.click();"
            "const li = document.getElementById(a.hash.slice(1)).getBoundingClientRect();"
            "return {top: li.top, bottom: li.bottom, ask: document.getElementById('ask').getBoundingClientRect().top};",
            turn.find_element(By.CSS_SELECTOR, ".body a.cite"),
        )
        assert in_view(box), box
    finally:
        browser.set_window_size(1000, 900)


def test_a_link_keeps_the_parentheses_of_its_url(browser: WebDriver, served: str, script: Script) -> None:
    script.tokens = [
        "See [Foo](https://en.wikipedia.org/wiki/Foo_(bar)) and [the spec](https://example.org/a_(b)_c",
        ' "its title") (twice), ',
        "not [this](javascript:alert(document.domain)) [1].",
    ]
    open_page(browser, served)
    turn = ask(browser, "How do I change the chunk size?")
    finished(browser, turn)
    body = turn.find_element(By.CSS_SELECTOR, ".body")
    links = [(a.text, a.get_attribute("href")) for a in body.find_elements(By.CSS_SELECTOR, "a:not(.cite)")]
    assert links == [("Foo", "https://en.wikipedia.org/wiki/Foo_(bar)"), ("the spec", "https://example.org/a_(b)_c")]
    assert body.text == "See Foo and the spec (twice), not this [1]."  # no stray ")"; the javascript: link is text


def test_a_reload_shows_the_conversation_again(browser: WebDriver, served: str, script: Script) -> None:
    open_page(browser, served)
    script.tokens = ["Set **chunk.size** [1]:\n\n", "- in `config.yaml`;\n", "- or <b>per run</b> [1].\n"]
    finished(browser, answered := ask(browser, "How do I change the chunk size?"))
    assert answered.find_elements(By.CSS_SELECTOR, ".sources li")
    browser.find_element(By.ID, "search-only").click()
    finished(browser, ask(browser, "chunk size setting"))
    browser.find_element(By.ID, "search-only").click()
    script.status, script.error_body = 500, b'{"error": {"message": "model overloaded"}}'
    finished(browser, failed := ask(browser, "How do I change the chunk size?"))
    assert failed.find_elements(By.CSS_SELECTOR, ".note.error")
    script.status, script.tokens, script.delay = 200, ["word "] * 400, 0.05
    coming = ask(browser, "What happens when indexing is interrupted?")
    wait_for(browser, lambda b: "word" in coming.text, "the first words")
    questions = [t.find_element(By.CSS_SELECTOR, ".question").text for t in turns(browser)]
    # as rendered, but for the Ask again button's state (disabled while an answer comes)
    shown = [t.get_attribute("outerHTML").replace(' disabled=""', "") for t in turns(browser)[:3]]
    browser.refresh()
    wait_for(browser, lambda b: state(b).startswith("ready:"), "the ready state after the reload")
    again = turns(browser)
    assert [t.find_element(By.CSS_SELECTOR, ".question").text for t in again] == questions
    assert [t.get_attribute("outerHTML").replace(' disabled=""', "") for t in again[:3]] == shown  # as they were
    # the answer that was still coming: its words so far, stopped, without sources
    assert script.disconnected.wait(30), "the reload did not close the LLM request"
    assert again[3].get_attribute("data-done") is not None and "streaming" not in again[3].get_attribute("class")
    assert again[3].find_element(By.CSS_SELECTOR, ".body").text.startswith("word word")
    assert "reloaded" in again[3].find_element(By.CSS_SELECTOR, ".note.stopped").text
    assert again[3].find_elements(By.CSS_SELECTOR, ".sources") == []
    # the restored turns work, and the conversation goes on
    click(browser, again[0].find_element(By.CSS_SELECTOR, "a.cite"))  # not under the header, kept at the top
    wait_for(browser, lambda b: again[0].find_elements(By.CSS_SELECTOR, ".sources .passage"), "the cited passage")
    script.tokens, script.delay = ["Done [1]."], 0.0
    finished(browser, last := ask(browser, "How do I change the chunk size?"))
    assert last.get_attribute("id") == "t5" and "Done" in last.text
    # the conversations in the browser, the tab's own named for the tab; nothing else kept
    assert browser.execute_script("return [Object.keys(sessionStorage), Object.keys(localStorage)]") == [
        ["mdrag-conversation"],
        ["mdrag-conversations"],
    ]
    assert [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_a_follow_up_is_sent_with_the_earlier_turns_until_a_new_conversation(
    browser: WebDriver, served: str, script: Script
) -> None:
    """The page sends its earlier turns with each question (the server's LLM is asked to rewrite the
    follow-up with them, also after a reload); New conversation clears the thread."""
    open_page(browser, served)
    new = browser.find_element(By.ID, "new-conversation")
    assert not new.is_enabled()  # nothing to forget yet
    finished(browser, ask(browser, "How do I set the chunk size?"))
    assert not any(is_rewrite(r["body"]) for r in script.requests), "a first question is asked alone"
    script.rewrite = "How do I set the chunk overlap?"
    finished(browser, follow := ask(browser, "and the overlap?"))
    assert follow.find_elements(By.CSS_SELECTOR, ".sources li")
    rewrites = [r["body"]["messages"][-1]["content"] for r in script.requests if is_rewrite(r["body"])]
    assert len(rewrites) == 1 and "Last question: and the overlap?" in rewrites[0]
    assert "Question: How do I set the chunk size?\nAnswer: Hello, world [1]." in rewrites[0]
    browser.refresh()  # the thread is the tab's: a reload goes on with it
    wait_for(browser, lambda b: state(b).startswith("ready:"), "the ready state after the reload")
    finished(browser, ask(browser, "and the default?"))
    rewrites = [r["body"]["messages"][-1]["content"] for r in script.requests if is_rewrite(r["body"])]
    assert len(rewrites) == 2 and "Question: and the overlap?" in rewrites[1]
    assert "Question: How do I set the chunk size?" in rewrites[1]
    browser.find_element(By.ID, "new-conversation").click()
    assert turns(browser) == []
    finished(browser, ask(browser, "and the overlap?"))
    assert len([r for r in script.requests if is_rewrite(r["body"])]) == 2, "a new conversation is asked alone"
    assert [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_the_conversation_kept_for_a_reload_is_capped(browser: WebDriver, served: str, script: Script) -> None:
    open_page(browser, served)
    kept = [
        {"kind": "answer", "question": f"question {i}", "text": f"answer {i} " + "x" * 10_000, "done": True}
        for i in range(80)
    ]
    kept[-1]["question"] = "<img src=x onerror=\"document.title='pwned'\">"  # shown as text, like any question
    browser.get(served + "favicon.svg")  # the same origin, without the page (which keeps its own turns)
    browser.execute_script(
        "localStorage.setItem('mdrag-conversations', JSON.stringify([{id: 'c-big', updated: 1, turns: arguments[0]}]));"
        "sessionStorage.setItem('mdrag-conversation', 'c-big')",
        kept,
    )
    browser.get(served)
    wait_for(browser, lambda b: state(b).startswith("ready:"), "the ready state")
    assert len(turns(browser)) == 80 and browser.find_elements(By.CSS_SELECTOR, "#log img") == []
    assert (
        browser.title == "mdrag"
        and turns(browser)[-1].find_element(By.CSS_SELECTOR, ".question").text == kept[-1]["question"]
    )
    browser.find_element(By.ID, "search-only").click()
    finished(browser, ask(browser, "chunk size setting"))
    stored = wait_for(
        browser,
        lambda b: (
            (s := b.execute_script("return localStorage.getItem('mdrag-conversations')")) and "chunk size" in s and s
        ),
        "the new turn kept",
    )
    (conversation,) = json.loads(stored)
    assert conversation["id"] == "c-big"
    now = conversation["turns"]
    assert now[-1]["question"] == "chunk size setting" and now[-1]["results"]
    assert len(now) < len(kept) and len(stored) < len(json.dumps(kept))  # the oldest turns went
    assert now[-2]["question"] == kept[-1]["question"] and now[0]["question"] != "question 0"
    assert len(turns(browser)) == 81  # the page itself still shows them all
    browser.execute_script("localStorage.clear()")


class _PageHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


def test_a_page_of_another_origin_cannot_connect(
    browser: WebDriver, served: str, tmp_path: Path, script: Script
) -> None:
    ws_url = served.replace("http://", "ws://")
    (tmp_path / "probe.html").write_text(
        "<!doctype html><title>probe</title><script>"
        f"const ws = new WebSocket('{ws_url}');"
        "ws.onmessage = e => { document.title = 'open ' + JSON.parse(e.data).type; };"
        "ws.onerror = () => { document.title = 'refused'; };"
        "</script>"
    )
    handler = lambda *a, **kw: _PageHandler(*a, directory=str(tmp_path), **kw)  # noqa: E731
    other = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=other.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        port = other.server_address[1]
        # the same probe from a loopback page connects (so the refusal below is the origin's doing)
        browser.get(f"http://127.0.0.1:{port}/probe.html")
        wait_for(browser, lambda b: b.title != "probe", "the probe's outcome")
        assert browser.title == "open status"
        browser.get(f"http://{FOREIGN}:{port}/probe.html")
        wait_for(browser, lambda b: b.title != "probe", "the probe's outcome")
        assert browser.title == "refused"
    finally:
        other.shutdown()
        other.server_close()


def test_with_a_token_the_page_asks_for_it_and_keeps_it_for_the_session(
    browser: WebDriver, tmp_path: Path, script: Script
) -> None:
    (tmp_path / "empty").mkdir()
    with _serve(tmp_path / "home", tmp_path / "empty", None, "--token", "s3cret-t0ken") as port:
        browser.get(f"http://127.0.0.1:{port}/")
        wait_for(browser, lambda b: b.find_element(By.ID, "token-form").is_displayed(), "the token form")
        assert "token" in state(browser)
        field = browser.find_element(By.ID, "token")
        field.send_keys("wrong" + Keys.ENTER)
        wait_for(browser, lambda b: "refused the token" in state(b), "the refused token")
        field.send_keys("s3cret-t0ken" + Keys.ENTER)
        wait_for(browser, lambda b: state(b).startswith("empty"), "the empty state")
        assert not browser.find_element(By.ID, "token-form").is_displayed()
        assert browser.execute_script("return sessionStorage.getItem('mdrag-token')") == "s3cret-t0ken"
        assert browser.execute_script("return localStorage.length") == 0
        browser.refresh()  # the same session: no question asked again
        wait_for(browser, lambda b: state(b).startswith("empty"), "the empty state after a reload")
        browser.execute_script("sessionStorage.clear()")


@contextmanager
def in_thread(server: QAServer) -> Iterator[QAServer]:
    """Run ``server`` on an event loop in a thread until the block ends."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(60)
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_while_loading_the_page_says_so_and_asks_again_once_ready(
    browser: WebDriver, tmp_path: Path, fake_llm: FakeServer, script: Script
) -> None:
    release = threading.Event()

    class Held(HashEmbedder):  # the index stays "loading" until the test releases it
        def embed_batch(self, texts):  # type: ignore[no-untyped-def]
            release.wait(60)
            return super().embed_batch(texts)

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "install.md").write_text("# Install\n\nRun the installer, then restart the service.\n")
    llm_url = f"http://127.0.0.1:{fake_llm.server_address[1]}/v1"
    config = load_config(
        {
            "index": "w" + os.urandom(4).hex(),
            "server.port": 0,
            "llm.base_url": llm_url,
            "search.threshold": 0,  # the hashing embedder's scores are low: answer from any match
            "answer.min_score": 0,
            "answer.max_unknown": 1,
        }
    )
    server = QAServer(config, [docs], overrides={"server.port": 0}, index=Index(config, embedder=Held()))
    script.tokens = ["Run the installer [1]."]
    try:
        with in_thread(server):
            browser.get(f"http://127.0.0.1:{server.port}/")
            wait_for(
                browser, lambda b: state(b) == "loading the index: indexing: 0 of 1 files…", "the loading state"
            )  # with its progress: the embedder holds the only file
            turn = ask(browser, "How do I run the installer?")
            wait_for(browser, lambda b: "still loading" in turn.text, "the not-ready note")
            assert script.requests == []
            release.set()
            finished(browser, turn)  # asked again by the page once the index is ready
            assert state(browser) == "ready: 1 files, 1 chunks"
            assert "Run the installer" in turn.text and "still loading" not in turn.text
            assert turn.find_element(By.CSS_SELECTOR, ".sources summary").get_attribute("title") == str(
                docs / "install.md"
            )
    finally:
        release.set()


def in_window(browser: WebDriver, element_id: str) -> bool:
    """Whether the element is wholly inside the window (not scrolled away)."""
    return bool(
        browser.execute_script(
            "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
            "return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight;",
            element_id,
        )
    )


def test_when_the_server_goes_away_the_state_stays_in_view_and_a_question_is_kept_saying_why(
    browser: WebDriver, tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "install.md").write_text("# Install\n\nRun the installer, then restart the service.\n")
    config = load_config({"index": "w" + os.urandom(4).hex(), "server.port": 0})
    server = QAServer(config, [docs], overrides={"server.port": 0}, index=Index(config, embedder=HashEmbedder()))
    with in_thread(server):
        browser.get(f"http://127.0.0.1:{server.port}/")
        wait_for(browser, lambda b: state(b).startswith("ready:"), "the ready state")
        # a long conversation, read from its end: the header's state line stays at the top of the window
        browser.execute_script(
            "for (let i = 0; i < 40; i++) { const p = document.createElement('p'); p.textContent = 'line ' + i;"
            " document.getElementById('log').append(p); } window.scrollTo(0, document.body.scrollHeight);"
        )
        assert browser.execute_script("return window.scrollY") > 300
        assert in_window(browser, "state")
    wait_for(browser, lambda b: state(b).startswith("not connected"), "that the server went away")
    assert in_window(browser, "state")
    box = browser.find_element(By.ID, "question")
    box.send_keys("How do I run the installer?" + Keys.ENTER)
    unsent = wait_for(browser, lambda b: b.find_element(By.ID, "unsent").text, "why the question was not sent", 10)
    assert unsent == "not connected: reconnecting…; your question was kept"
    assert box.get_attribute("value") == "How do I run the installer?" and in_window(browser, "unsent")
    assert turns(browser) == []
    shot = os.environ.get("MDRAG_OFFLINE_SCREENSHOT")
    if shot:
        browser.save_screenshot(shot)


def _hits(browser: WebDriver) -> list[tuple[int, str]]:
    """The marked lines of the open source: number and text, once the dialog shows them."""
    rows = wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#viewer[open] .line.hit"), "the cited lines")
    return [(int(r.get_attribute("data-n")), r.get_attribute("textContent")) for r in rows]


def test_a_source_opens_at_its_cited_lines(browser: WebDriver, served: str, script: Script) -> None:
    open_page(browser, served)
    browser.get_log("browser")  # what earlier tests left there
    docs = REPO / "examples" / "docs"
    # a result of Search only: its open button shows the file with the result's lines marked, in view
    browser.find_element(By.ID, "search-only").click()
    turn = ask(browser, "chunk size setting")
    result = wait_for(browser, lambda b: turn.find_elements(By.CSS_SELECTOR, ".results .passage"), "results")[0]
    first, last = (int(n) for n in result.find_element(By.CSS_SELECTOR, ".lines").text.split()[-1].split("–"))
    lines = (docs / result.find_element(By.CSS_SELECTOR, ".file").text).read_text().split("\n")
    result.find_element(By.CSS_SELECTOR, "button.open").click()
    assert _hits(browser) == [(n, lines[n - 1]) for n in range(first, last + 1)]
    assert browser.execute_script(
        "const hit = document.querySelector('#viewer .line.hit').getBoundingClientRect();"
        "const box = document.getElementById('viewer-text').getBoundingClientRect();"
        "return hit.top >= box.top && hit.bottom <= box.bottom;"
    ), "the cited lines are not scrolled into view"
    whole = browser.find_elements(By.CSS_SELECTOR, "#viewer .line")
    assert len(whole) == len(lines) - 1  # the whole file (it ends with a line break)
    browser.find_element(By.ID, "viewer-close").click()
    assert not browser.find_element(By.ID, "viewer").is_displayed()
    # an answer's source: its open button shows the file at the best passage's lines, not folding the passages
    browser.find_element(By.ID, "search-only").click()
    script.tokens = ["Set `chunk.size` [1]."]
    finished(browser, answered := ask(browser, "How do I change the chunk size?"))
    item = answered.find_element(By.CSS_SELECTOR, ".sources > li")
    path = Path(item.find_element(By.TAG_NAME, "summary").get_attribute("title"))
    item.find_element(By.CSS_SELECTOR, "button.open").click()
    hits = _hits(browser)
    text = path.read_text().split("\n")
    assert hits and all(line == text[n - 1] for n, line in hits)
    assert browser.find_element(By.ID, "viewer-title").text.startswith(str(path.relative_to(docs)))
    assert item.find_element(By.TAG_NAME, "details").get_attribute("open") is None
    browser.find_element(By.ID, "viewer-close").click()
    assert [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_with_a_token_the_page_opens_a_source_with_it(browser: WebDriver, tmp_path: Path, script: Script) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "install.md").write_text("# Install\n\nRun the installer.\n\nThen restart the service.\n")
    with _serve(tmp_path / "home", tmp_path / "docs", None, "--token", "s3cret-t0ken") as port:
        browser.get(f"http://127.0.0.1:{port}/")
        wait_for(browser, lambda b: b.find_element(By.ID, "token-form").is_displayed(), "the token form")
        browser.find_element(By.ID, "token").send_keys("s3cret-t0ken" + Keys.ENTER)
        wait_for(browser, lambda b: state(b).startswith("ready:"), "the ready state", 180)
        browser.find_element(By.ID, "search-only").click()
        turn = ask(browser, "run the installer")
        wait_for(browser, lambda b: turn.find_elements(By.CSS_SELECTOR, ".results .passage"), "results")
        turn.find_element(By.CSS_SELECTOR, ".results button.open").click()
        assert (3, "Run the installer.") in _hits(browser)  # the token went in a header: no 401
        browser.find_element(By.ID, "viewer-close").click()
        browser.execute_script("sessionStorage.setItem('mdrag-token', 'wrong')")
        turn.find_element(By.CSS_SELECTOR, ".results button.open").click()
        wait_for(browser, lambda b: "valid token" in b.find_element(By.ID, "viewer-text").text, "the refusal")
        browser.execute_script("sessionStorage.clear()")


# -- errors the page recovers from, ids, answers without an LLM, kept conversations, copying --------
def _dead_and_live_cites(turn: WebElement) -> tuple[list[str], list[str]]:
    body = turn.find_element(By.CSS_SELECTOR, ".body")
    return (
        [a.text for a in body.find_elements(By.CSS_SELECTOR, "a.cite")],
        [s.text for s in body.find_elements(By.CSS_SELECTOR, "span.cite.dead")],
    )


def test_after_an_llm_error_the_page_offers_to_ask_again_keeps_the_question_and_lists_the_passages(
    browser: WebDriver, served: str, script: Script
) -> None:
    open_page(browser, served)
    browser.get_log("browser")  # what earlier tests left there
    box = browser.find_element(By.ID, "question")
    # the LLM fails after a first piece that cites [1] and a [7] no source has
    script.tokens, script.error_event = ["Set `chunk.size` [1], see also [7]. ", "never sent"], "the model crashed"
    failed = ask(browser, "How do I change the chunk size?")
    finished(browser, failed)
    assert "the model crashed" in failed.find_element(By.CSS_SELECTOR, ".note.error").text
    assert box.get_attribute("value") == "How do I change the chunk size?"  # kept, to send again or edit
    # the passages the server found for it are listed, [1] opens the first; [7] is no link
    assert failed.find_element(By.CSS_SELECTOR, ".found").text == "The passages found for this question:"
    sources = failed.find_elements(By.CSS_SELECTOR, ".sources > li")
    assert sources and sources[0].find_element(By.CSS_SELECTOR, ".num").text == "[1]"
    assert _dead_and_live_cites(failed) == (["[1]"], ["[7]"])
    failed.find_element(By.CSS_SELECTOR, "a.cite").click()
    wait_for(browser, lambda b: sources[0].find_elements(By.CSS_SELECTOR, ".passage"), "the found passage")
    # Ask again: the failed turn goes, the question is asked anew, the box is emptied
    script.tokens, script.error_event = ["Done [1]."], None
    click(browser, failed.find_element(By.CSS_SELECTOR, ".actions button.again"))
    wait_for(browser, lambda b: len(turns(b)) == 1 and turns(b)[0].get_attribute("id") != "t1", "the new turn")
    finished(browser, again := turns(browser)[0])
    assert again.find_element(By.CSS_SELECTOR, ".body").text == "Done [1]." and not box.get_attribute("value")
    assert again.find_elements(By.CSS_SELECTOR, ".sources > li") and not again.find_elements(By.CSS_SELECTOR, ".note")
    # an answer stopped before its sources: its [1] is no link either, and it can be asked again
    script.tokens, script.delay = ["See [1]. ", *["word "] * 400], 0.05
    stopped = ask(browser, "How do I change the chunk size?")
    wait_for(browser, lambda b: "word" in stopped.text, "the first words")
    browser.find_element(By.ID, "stop").click()
    wait_for(browser, lambda b: stopped.find_elements(By.CSS_SELECTOR, ".note.stopped"), "the stop")
    assert _dead_and_live_cites(stopped) == ([], ["[1]"]) and not stopped.find_elements(By.CSS_SELECTOR, ".sources")
    wait_for(browser, lambda b: state(b).startswith("ready:"), "the ready state after the stop")
    assert stopped.find_element(By.CSS_SELECTOR, ".actions button.again").text == "Ask again"
    script.delay = 0.0
    assert [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def _docs_server(tmp_path: Path, files: dict[str, str], **settings: Any) -> QAServer:
    """A QAServer over ``files`` with the hashing embedder (quick), answering from any match."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in files.items():
        (docs / name).write_text(text)
    config = load_config(
        {
            "index": "w" + os.urandom(4).hex(),
            "server.port": 0,
            "search.threshold": 0,  # the hashing embedder's scores are low: answer from any match
            "answer.min_score": 0,
            "answer.max_unknown": 1,
            **settings,
        }
    )
    return QAServer(config, [docs], overrides={"server.port": 0}, index=Index(config, embedder=HashEmbedder()))


def test_an_early_refusal_lands_on_its_own_request_not_on_the_answer_streaming(
    browser: WebDriver, tmp_path: Path, fake_llm: FakeServer, script: Script
) -> None:
    """With one request allowed to wait, opening two sources while an answer streams: the second search is
    refused at once, before the answer ends. Matched by id, the refusal is said in that source's box, and the
    answer streaming meanwhile ends whole (matched by order, it took the refusal for its own)."""
    files = {f"install{i}.md": f"# Install {i}\n\nRun the installer {i}, then restart the service.\n" for i in range(3)}
    llm_url = f"http://127.0.0.1:{fake_llm.server_address[1]}/v1"
    server = _docs_server(tmp_path, files, **{"llm.base_url": llm_url, "server.max_pending": 1})
    with in_thread(server):
        browser.get(f"http://127.0.0.1:{server.port}/")
        wait_for(browser, lambda b: state(b).startswith("ready:"), "the ready state")
        script.tokens = ["Run the installer [1] [2]."]
        finished(browser, first := ask(browser, "How do I run the installer?"))
        sources = first.find_elements(By.CSS_SELECTOR, ".sources > li")
        assert len(sources) >= 2
        script.tokens, script.delay = [f"step {i} " for i in range(60)], 0.1
        streaming = ask(browser, "And then?")
        wait_for(browser, lambda b: "step" in streaming.text, "the answer streaming")
        for item in sources[:2]:
            browser.execute_script("arguments[0].click()", item.find_element(By.TAG_NAME, "summary"))
        refused = wait_for(
            browser, lambda b: sources[1].find_elements(By.CSS_SELECTOR, ".note.error"), "the refusal", 30
        )[0]
        assert "too many requests waiting" in refused.text
        assert "streaming" in streaming.get_attribute("class")  # the refusal came while it streamed
        finished(browser, streaming)
        assert not streaming.find_elements(By.CSS_SELECTOR, ".note.error"), streaming.text
        assert streaming.find_elements(By.CSS_SELECTOR, ".sources > li") and "step 59" in streaming.text
        wait_for(
            browser, lambda b: sources[0].find_elements(By.CSS_SELECTOR, ".passage"), "the waiting search's passages"
        )
    script.delay = 0.0
    browser.execute_script("localStorage.clear()")


# what the page copies, caught (a headless browser's clipboard cannot be read back)
CATCH_COPIES = (
    "window.copied = []; navigator.clipboard.writeText = t => { window.copied.push(t); return Promise.resolve(); }"
)

COMMENTED = (
    "# Chunk size\n\n<!-- TODO: explain the overlap too -->\nThe chunk size is set with `chunk.size` in the config.\n"
    "<!--\nmulti-line\ncomment -->\n\n```html\n<!-- kept in code -->\n<p>size</p>\n```\n"
)


def test_an_answer_without_an_llm_sets_headings_apart_and_shows_no_html_comment(
    browser: WebDriver, tmp_path: Path, script: Script
) -> None:
    server = _docs_server(tmp_path, {"commented.md": COMMENTED})
    with in_thread(server):
        browser.get(f"http://127.0.0.1:{server.port}/")
        wait_for(browser, lambda b: state(b).startswith("ready:"), "the ready state")
        finished(browser, turn := ask(browser, "How is the chunk size set?"))
        body = turn.find_element(By.CSS_SELECTOR, ".body")
        paragraphs = [p.text for p in body.find_elements(By.CSS_SELECTOR, ":scope > p")]
        assert paragraphs[1:] == [
            "[1] commented.md",
            "— Chunk size",
            "The chunk size is set with chunk.size in the config.",
        ], paragraphs
        assert (
            "TODO" not in body.text
            and "multi-line" not in body.text
            and "<!--" not in body.text.replace("<!-- kept in code -->", "")
        )
        assert body.find_element(By.CSS_SELECTOR, "pre code").text == "<!-- kept in code -->\n<p>size</p>"
        # the code block's copy button copies the code
        browser.execute_script(CATCH_COPIES)
        click(browser, body.find_element(By.CSS_SELECTOR, ".code > button.copy"))
        wait_for(browser, lambda b: b.execute_script("return window.copied.length"), "the copy")
        assert browser.execute_script("return window.copied") == ["<!-- kept in code -->\n<p>size</p>"]
        # a passage of Search only: shown without the comments either
        browser.find_element(By.ID, "search-only").click()
        found = ask(browser, "chunk size")
        text = wait_for(browser, lambda b: found.find_elements(By.CSS_SELECTOR, ".results .passage .text"), "results")
        assert "TODO" not in text[0].text and "The chunk size is set" in text[0].text
    assert script.requests == []
    browser.execute_script("localStorage.clear()")


def _listed(browser: WebDriver) -> list[tuple[str, bool]]:
    """The conversations the list shows: their titles, and whether each is the tab's (read at once: the list
    is made again at each change)."""
    return [
        (title, current)
        for title, current in browser.execute_script(
            "return [...document.querySelectorAll('#conversations li')].map(li =>"
            " [li.querySelector('.open-conversation').textContent, li.getAttribute('aria-current') === 'true'])"
        )
    ]


def test_the_last_conversations_are_kept_listed_opened_and_forgotten(
    browser: WebDriver, served: str, script: Script
) -> None:
    open_page(browser, served)
    browser.get_log("browser")  # what earlier tests left there
    browser.execute_script("localStorage.clear()")
    browser.refresh()
    wait_for(browser, lambda b: state(b).startswith("ready:"), "the ready state")
    assert not browser.find_element(By.ID, "conversations").is_displayed()  # nothing kept yet
    script.tokens = ["Set **chunk.size** [1]."]
    finished(browser, first := ask(browser, "How do I change the chunk size?"))
    # the answer's copy button: its Markdown, then its sources
    browser.execute_script(CATCH_COPIES)
    path = first.find_element(By.CSS_SELECTOR, ".sources summary").get_attribute("title")
    click(browser, first.find_element(By.CSS_SELECTOR, ".actions button.copy"))
    wait_for(browser, lambda b: b.execute_script("return window.copied.length"), "the copy")
    assert browser.execute_script("return window.copied") == [f"Set **chunk.size** [1].\n\nSources:\n[1] {path}\n"]
    browser.find_element(By.ID, "new-conversation").click()
    finished(browser, ask(browser, "What happens when indexing is interrupted?"))
    wait_for(browser, lambda b: len(_listed(b)) == 2, "both conversations listed")
    assert _listed(browser) == [
        ("What happens when indexing is interrupted?", True),
        ("How do I change the chunk size?", False),
    ]
    # another tab: a new conversation of its own, the kept ones listed
    open_page(browser, served)
    assert turns(browser) == [] and [t for t, _ in _listed(browser)] == [
        "What happens when indexing is interrupted?",
        "How do I change the chunk size?",
    ]
    listing = browser.find_element(By.ID, "conversations")
    listing.find_element(By.TAG_NAME, "summary").click()
    listing.find_elements(By.CSS_SELECTOR, ".open-conversation")[1].click()
    wait_for(browser, lambda b: len(turns(b)) == 1, "the conversation opened")
    assert turns(browser)[0].find_element(By.CSS_SELECTOR, ".body").text == "Set chunk.size [1]."
    assert _listed(browser)[1] == ("How do I change the chunk size?", True)
    # it goes on: a follow-up is asked with its earlier turn
    script.rewrite = "How do I set the chunk overlap?"
    finished(browser, ask(browser, "and the overlap?"))
    rewrites = [r["body"]["messages"][-1]["content"] for r in script.requests if is_rewrite(r["body"])]
    assert rewrites and "Question: How do I change the chunk size?" in rewrites[-1]
    wait_for(browser, lambda b: _listed(b)[0] == ("How do I change the chunk size?", True), "it listed first")
    # forget one, then all (after a confirmation)
    listing.find_element(By.TAG_NAME, "summary").click()
    listing.find_elements(By.CSS_SELECTOR, "li button.forget")[1].click()
    assert [t for t, _ in _listed(browser)] == ["How do I change the chunk size?"] and len(turns(browser)) == 2
    browser.find_element(By.ID, "forget-all").click()
    browser.switch_to.alert.accept()
    wait_for(browser, lambda b: not b.find_element(By.ID, "conversations").is_displayed(), "the list gone")
    assert turns(browser) == [] and browser.execute_script("return localStorage.length") == 0
    assert [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
