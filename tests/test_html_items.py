"""Pages of named items (settings in a definition list, bold-led list items, FAQ questions, a page's own heading
element): each item's name joins the heading path of its chunks, and a search naming an item finds its chunk."""

from __future__ import annotations

from pathlib import Path

import pytest

from mdrag.chunking import chunk_document
from mdrag.config import load_config
from mdrag.index import Index
from mdrag.parsers import get_parser
from mdrag.types import Document

# Settings of a made-up tool, each explained at length (an item of its own) ...
_LONG = {
    "fetch.pruneStaleBranches": "When this is true, every fetch removes the remote-tracking branches whose branch "
    "is gone from the remote, as if the prune option had been given on the command line. Branches you created "
    "yourself are never touched. Set it per remote to keep the branches of one mirror while pruning the others; "
    "the value given on the command line wins over both. It defaults to false, because a branch deleted by "
    "mistake on the server would otherwise vanish from every clone at the next fetch.",
    "pager.colorMoves": "Chooses how lines that moved inside a diff are painted: plain marks any moved line, "
    "blocks marks runs of at least twenty characters that moved together, and zebra alternates two colours so "
    "that neighbouring blocks can be told apart. The setting only applies when the output goes to a terminal "
    "that shows colours. With dimmed-zebra the uninteresting parts of a moved block are shown dimmer, which "
    "helps reviewers spot a small edit hidden in a long block that was otherwise moved unchanged.",
    "gc.reflogLifetime": "How long the garbage collector keeps entries of the reference logs before it expires "
    "them, as an approximate date such as ninety days ago. Entries that are no longer reachable from the tip of "
    "their branch use the shorter lifetime of the unreachable setting instead. Raising the value keeps the "
    "history of a branch longer, which lets you recover a commit lost by a bad rebase months later, at the "
    "price of a bigger repository, since every object a log entry names stays on disk.",
    "http.lowSpeedTimeout": "The number of seconds a transfer may run slower than the low speed limit before it "
    "is aborted. Together with that limit it stops clones that hang on a broken proxy instead of waiting for "
    "ever; set both to zero to wait without end. The environment variable of the same meaning overrides this "
    "value. A slow satellite link may need a larger value than the default of thirty seconds, or the clone "
    "fails halfway with a message that the operation was too slow.",
}
# ... and three one-liners, adjacent: they share a section under the list's heading.
_SHORT = {
    "color.ui": "Turns on colours for every command that supports them.",
    "core.editor": "The editor started for commit messages.",
    "user.email": "The address recorded in every commit you make.",
}


def _page(items: str, *, title: str = "Settings") -> bytes:
    intro = "<p>Every setting is read from the configuration files in order; a later file wins over an earlier.</p>"
    return (
        f"<html><head><title>{title}</title></head><body><div id='content'><h1>{title}</h1>"
        f"<h2>Variables</h2>{intro}{items}</div></body></html>"
    ).encode()


def _parse(data: bytes, name: str = "/settings.html") -> Document:
    return get_parser("p.html")(data, name)


def _dl_page() -> bytes:
    entries = {**dict(list(_LONG.items())[:2]), **_SHORT, **dict(list(_LONG.items())[2:])}
    return _page("<dl>" + "".join(f"<dt>{n}</dt><dd><p>{t}</p></dd>" for n, t in entries.items()) + "</dl>")


def test_definition_list_items_head_their_own_sections_and_short_ones_share_one_named_by_them() -> None:
    doc = _parse(_dl_page())
    for name, text in _LONG.items():
        section = next(s for s in doc.sections if text in s.text)
        assert section.heading_path == ["Settings", "Variables", name]
        assert not any(other in section.text for other in _LONG.values() if other != text)  # one item alone
    shared = [s for s in doc.sections if _SHORT["color.ui"] in s.text]
    assert len(shared) == 1 and shared[0].heading_path == ["Settings", "Variables", ", ".join(_SHORT)]
    assert all(f"{n}\n\n{t}" in shared[0].text for n, t in _SHORT.items())  # the names stay in its text
    assert not any(t in shared[0].text for t in _LONG.values())
    chunks = chunk_document(doc, "/", "settings.html")
    for name, text in _LONG.items():
        assert [c.heading_path for c in chunks if text[:60] in c.text] == [["Settings", "Variables", name]]


def test_nested_list_items_go_under_their_item_and_the_list_ends_with_its_items() -> None:
    inner = "".join(f"<dt>advice.{n}</dt><dd><p>{t}</p></dd>" for n, t in _LONG.items())
    after = "After the list: this paragraph belongs to the section of the heading above the list, not an item."
    outer = (
        f"<dl><dt>advice.*</dt><dd><p>Hints shown to new users; each can be turned off.</p><dl>{inner}</dl></dd>"
        + "".join(f"<dt>{n}</dt><dd><p>{t}</p></dd>" for n, t in _LONG.items())
        + f"</dl><p>{after}</p>"
    )
    doc = _parse(_page(outer))
    assert [s.heading_path for s in doc.sections] == [
        ["Settings", "Variables"],
        ["Settings", "Variables", "advice.*"],
        *[["Settings", "Variables", "advice.*", f"advice.{n}"] for n in _LONG],
        *[["Settings", "Variables", n] for n in _LONG],
        ["Settings", "Variables"],  # the paragraph after the list
    ]
    assert after in doc.sections[-1].text


def test_bold_led_list_items_and_paragraphs_head_their_text_and_keep_it() -> None:
    items = "".join(f"<li><b>{n}</b>: {t}</li>" for n, t in _LONG.items())
    doc = _parse(_page(f"<ul>{items}</ul>"))
    for name, text in _LONG.items():
        section = next(s for s in doc.sections if text in s.text)
        assert section.heading_path[-1] == name and f"{name}: " in section.text  # the lead stays in its sentence
    paragraphs = "".join(f"<p><strong>{n}</strong> &mdash; {t}</p>" for n, t in _LONG.items())
    closing = "<h2>See also</h2><p>The manual of the tool.</p>"
    doc = _parse(_page(paragraphs + closing))
    assert [s.heading_path[-1] for s in doc.sections if any(t in s.text for t in _LONG.values())] == list(_LONG)
    assert doc.sections[-1].heading_path == ["Settings", "See also"]


def test_faq_questions_and_a_pages_own_heading_element_become_headings() -> None:
    questions = [f"How do I change {n}?" for n in _LONG]
    faq = "".join(f"<p>{q}</p><p>{t}</p>" for q, t in zip(questions, _LONG.values()))
    doc = _parse(_page(faq, title="FAQ"))
    for question, text in zip(questions, _LONG.values()):
        section = next(s for s in doc.sections if text in s.text)
        assert section.heading_path == ["FAQ", "Variables", question] and question not in section.text
    titled = "".join(f'<div class="title">{n}</div><p>{t}</p>' for n, t in _LONG.items())
    doc = _parse(_page(titled))
    assert [s.heading_path[-1] for s in doc.sections if any(t in s.text for t in _LONG.values())] == list(_LONG)


def test_repeated_notes_and_a_paragraphs_links_are_not_items() -> None:
    notes = "".join(f"<p><strong>Note:</strong> {t}</p><p>{t}</p>" for t in _LONG.values())
    links = "<p>" + " and ".join(f'<a class="ref" href="/{n}.html">{n}</a>' for n in _LONG) + " are settings.</p>"
    doc = _parse(_page(notes + links))
    assert {tuple(s.heading_path) for s in doc.sections} == {("Settings", "Variables")}


def test_questions_asked_in_passing_and_notes_under_headings_are_not_items() -> None:
    prose = [f"<p>{t}</p>" for t in _LONG.values()] * 6
    for n, name in enumerate(_LONG):  # four questions among 24 paragraphs of an essay
        prose.insert(6 * n, f"<p>Why would anyone touch {name}?</p>")
    doc = _parse(_page("".join(prose)))
    assert {tuple(s.heading_path) for s in doc.sections} == {("Settings", "Variables")}
    parts = "".join(
        f'<h3>{n}</h3><div class="hatnote">Main article: {n} explained</div><p>{t}</p>' for n, t in _LONG.items()
    )
    doc = _parse(_page(parts))
    assert [s.heading_path[-1] for s in doc.sections if any(t in s.text for t in _LONG.values())] == list(_LONG)


@pytest.mark.parametrize("mode", ["hybrid", "bm25", "dense"])
def test_a_search_naming_an_item_finds_its_own_chunk_first(tmp_path: Path, mode: str) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "settings.html").write_bytes(_dl_page())
    # nearly the same text without item names (not the same bytes: a passage two pages repeat is indexed once,
    # mdrag.ingest.passages)
    prose = "".join(f"<p>In short: {t}</p>" for t in _LONG.values())
    (docs / "guide.html").write_bytes(_page(prose, title="Guide"))
    with Index(load_config()) as index:
        index.update([docs])
        for name, text in _LONG.items():
            top = index.search(name, mode=mode, threshold=0.0)[0]
            assert top.rel_path == "settings.html" and top.heading_path[-1] == name and text[:60] in top.text


# A reference of one-line settings, as a shell manual lists its parameters: all short, so they share sections.
_ONE_LINERS = {
    "WORDCHARS": "Punctuation the line editor counts as part of a word.",
    "HISTSIZE": "How many events the history list keeps in memory.",
    "SAVEHIST": "How many history events are written to the file on exit.",
    "TMPPREFIX": "A pathname prefix for every temporary file the shell makes.",
    "KEYTIMEOUT": "Hundredths of a second to wait for the rest of a key sequence.",
    "LISTMAX": "Above this many matches, ask before listing completions.",
    "MAILCHECK": "Seconds between checks of the mailbox for new mail.",
    "PROMPT_EOL_MARK": "Shown where a command's output ended without a newline.",
    "REPORTTIME": "Commands running longer than this many seconds print their timing.",
    "TIMEFMT": "The format of the timing report printed by the time keyword.",
    "WATCHFMT": "The format of the login and logout reports for watched users.",
    "ZLE_SPACE_SUFFIX_CHARS": "Characters before which a space inserted by completion is removed.",
}


def test_a_long_run_of_short_items_shares_sections_each_named_by_its_items() -> None:
    page = "<dl>" + "".join(f"<dt>{n}</dt><dd><p>{t}</p></dd>" for n, t in _ONE_LINERS.items()) + "</dl>"
    doc = _parse(_page(page))
    groups = [s for s in doc.sections if s.heading_path[:2] == ["Settings", "Variables"] and len(s.heading_path) == 3]
    assert len(groups) > 1  # more names than one heading holds
    for section in groups:
        names = section.heading_path[-1].split(", ")
        assert 1 < len(names) and len(section.heading_path[-1]) <= 120
        assert [n for n in _ONE_LINERS if f"{n}\n\n{_ONE_LINERS[n]}" in section.text] == names  # names stay in text
    assert [n for s in groups for n in s.heading_path[-1].split(", ")] == list(_ONE_LINERS)


@pytest.mark.parametrize("mode", ["hybrid", "bm25", "dense"])
def test_a_search_naming_a_short_item_finds_its_group_at_the_top(tmp_path: Path, mode: str) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    page = "".join(f"<dt>{n}</dt><dd><p>{t}</p></dd>" for n, t in {**_LONG, **_ONE_LINERS}.items())
    (docs / "parameters.html").write_bytes(_page(f"<dl>{page}</dl>", title="Parameters"))
    # a guide that names every parameter in passing, a paragraph each
    guide = "<h2>Tuning the shell</h2>" + "".join(
        f"<p>Most people never change {n}; the defaults suit the line editor and the history well, and a wrong "
        "value is easy to undo by starting a new shell.</p>"
        for n in _ONE_LINERS
    )
    (docs / "guide.html").write_bytes(
        f"<html><head><title>Guide</title></head><body><h1>Guide</h1>{guide}</body></html>".encode()
    )
    with Index(load_config()) as index:
        index.update([docs])
        for name, text in _ONE_LINERS.items():
            results = index.search(name, mode=mode, threshold=0.0, k=5)
            # the page's place holds the group: its best section, or one attached to it (search.per_page 1)
            held = [
                [x for x in (r, *r.sections) if text in x.text] if r.rel_path == "parameters.html" else []
                for r in results
            ]
            found = [bool(h) for h in held].index(True)
            # the model alone reads a bare identifier loosely (the group among the first three), and hybrid fuses a
            # one-word query by rank, where a guide's paragraph naming it in passing may come first (the first two)
            assert found == 0 if mode == "bm25" else found < (2 if mode == "hybrid" else 3)
            assert name in held[found][0].heading_path[-1].split(", ")
