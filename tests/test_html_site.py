"""HTML manuals read as a person reads them: every section of a page, not only the one the extractor scores best."""

from __future__ import annotations

from mdrag.parsers import get_parser
from mdrag.types import Document

_PROSE = [
    "Git expects files to be stored with Unix line endings, so the carriage return of a Windows line ending "
    "shows as trailing whitespace in the output of the diff command on every changed line.",
    "Set the configuration option core.eol to native and mark which files are text in an attributes file, "
    "so that they are converted to the line endings of your platform when they are checked out again.",
    "A file whose name differs from another only in case looks modified on a file system that folds case; "
    "remove one of the two files from the index with the rm command and its cached option, then commit.",
    "A fetch stores a copy of the latest changes of the remote repository without touching the working tree, "
    "while a pull is a fetch followed at once by a merge or a rebase of the current branch onto them.",
]


def _manual_page() -> bytes:
    """A page as asciidoc renders Git's manual: a header, then one ``sect1`` div per section, a footer."""
    sections = "".join(
        f'<div class="sect1"><h2 id="s{n}">Section {n}</h2><div class="sectionbody"><div class="dlist"><dl>'
        f'<dt class="hdlist1">Question {n}?</dt><dd><p>{text}</p></dd></dl></div></div></div>'
        for n, text in enumerate(_PROSE)
    )
    menu = "".join(f'<li><a href="/p{n}.html">Page {n} of the site</a></li>' for n in range(12))
    return (
        '<html><head><title>gitfaq(7)</title></head><body class="manpage">'
        '<div id="header"><h1>gitfaq(7) Manual Page</h1><h2>NAME</h2><div class="sectionbody">'
        "<p>gitfaq - Frequently asked questions about using Git</p></div></div>"
        f'<div id="content">{sections}</div><div id="sidebar"><ul>{menu}</ul></div>'
        '<div id="footer"><div id="footer-text">Last updated 2024-05-31 00:35:55 UTC</div></div></body></html>'
    ).encode()


def _text(doc: Document) -> str:
    return "\n".join(s.text for s in doc.sections)


def test_html_manual_page_keeps_the_prose_of_every_section() -> None:
    doc = get_parser("p.html")(_manual_page(), "/gitfaq.html")
    text = _text(doc)
    for prose in _PROSE:
        assert prose in text
    assert [s.heading_path[-1] for s in doc.sections if s.heading_path][-4:] == [f"Section {n}" for n in range(4)]
    assert "Page 3 of the site" not in text  # the menu beside the content stays out


def _index_page(depth: int) -> bytes:
    """A cross-reference page: a title, a paragraph of its own, then 400 lines of links, nested ``depth`` deep."""
    entries = "".join(f'<li><a href="/t{n}.html">term{n}</a> <a href="/p{n}.html">page{n}</a></li>' for n in range(400))
    return (
        "<html><head><title>Keyword index</title></head><body>"
        + "<div>" * depth
        + "<h1>Keyword index</h1><p>This index lists every keyword of the manual with the pages that use it; "
        "follow a keyword to read about it.</p>" + f"<ul>{entries}</ul>" + "</div>" * depth + "</body></html>"
    ).encode()


def test_html_index_page_is_read_for_its_title_and_prose(caplog) -> None:
    for depth in (3, 300):  # shallow, and deeper than the main-content extraction reads
        caplog.clear()
        with caplog.at_level("INFO", logger="mdrag.parsers.html"):
            doc = get_parser("p.html")(_index_page(depth), "/keywords.html")
        text = _text(doc)
        assert "lists every keyword of the manual" in text
        assert "term17" not in text and "page399" not in text
        assert len(text) < 200
        assert doc.title == "Keyword index"
        assert len([r for r in caplog.records if "/keywords.html" in r.getMessage()]) == 1  # said once


def _guide(preamble: list[str], sections: list[list[str]]) -> bytes:
    """A page as asciidoc renders Git's guides: a header, the text before the first section in
    ``div#preamble`` (no class), then one ``sect1`` div per section, here each a list."""
    paragraphs = "".join(f'<div class="paragraph"><p>{text}</p></div>' for text in preamble)
    body = "".join(
        f'<div class="sect1"><h2 id="s{n}">Section {n}</h2><div class="sectionbody"><div class="ulist"><ul>'
        + "".join(f"<li><p>{text}</p></li>" for text in texts)
        + "</ul></div></div></div>"
        for n, texts in enumerate(sections)
    )
    return (
        '<html><head><title>A guide</title></head><body class="article"><div id="header"><h1>A guide</h1></div>'
        f'<div id="content"><div id="preamble"><div class="sectionbody">{paragraphs}</div></div>{body}</div>'
        '<div id="footnotes"><hr /></div><div id="footer"><div id="footer-text">Last updated 2024-05-31 00:35:55 UTC'
        "</div></div></body></html>"
    ).encode()


def test_html_guide_keeps_the_sections_after_its_preamble() -> None:
    # the extractor picks the preamble (its paragraphs score above the sections' lists): the sections were lost
    doc = get_parser("p.html")(_guide(_PROSE, [_PROSE[:2], _PROSE[2:]]), "/guide.html")
    assert [s.heading_path[-1] for s in doc.sections if s.heading_path] == ["Section 0", "Section 1"]
    text = _text(doc)
    assert all(text.count(prose) == 2 for prose in _PROSE)


def test_html_short_manual_page_keeps_every_section() -> None:
    # a page of a few hundred characters (git-version(1)): its options were left out
    page = (
        b'<html><head><title>git-version(1)</title></head><body class="manpage"><div id="content">'
        b'<div class="sect1"><h2 id="_description">DESCRIPTION</h2><div class="sectionbody"><div class="paragraph">'
        b"<p>With no options given, the version of git is printed on the standard output.</p></div>"
        b'<div class="paragraph"><p>Note that git --version is identical to git version because the former is '
        b"internally converted into the latter.</p></div></div></div>"
        b'<div class="sect1"><h2 id="_options">OPTIONS</h2><div class="sectionbody"><div class="dlist"><dl>'
        b'<dt class="hdlist1">--build-options</dt><dd><p>Include additional information about how git was built '
        b"for diagnostic purposes.</p></dd></dl></div></div></div></div></body></html>"
    )
    doc = get_parser("p.html")(page, "/git-version.html")
    assert "about how git was built" in _text(doc)
    assert "is printed on the standard output" in _text(doc)


def test_html_manual_page_keeps_its_name_line_from_the_page_header() -> None:
    # asciidoc writes the NAME section (the page's one-line summary) into div#header with the title
    doc = get_parser("p.html")(_manual_page(), "/gitfaq.html")
    assert doc.sections[0].heading_path == ["NAME"]
    assert doc.sections[0].text == "gitfaq - Frequently asked questions about using Git"
    assert "gitfaq(7) Manual Page" not in _text(doc) and "Last updated" not in _text(doc)


def test_html_site_header_and_comments_shaped_otherwise_stay_out() -> None:
    sections = "".join(
        f'<div class="sect1"><h2>Section {n}</h2><div class="sectionbody"><p>{text}</p></div></div>'
        for n, text in enumerate(_PROSE)
    )
    header = (  # a site header: a heading over a tagline of another shape, and a menu
        '<div id="top"><h2 class="brand">Acme Docs</h2><div class="tagline"><p>Everything about the Acme tools, '
        "written by the people who build them</p></div><ul>"
        + "".join(f'<li><a href="/p{n}.html">Page {n}</a></li>' for n in range(8))
        + "</ul></div>"
    )
    comments = "".join(  # after the article: comments shaped as its sections
        f'<div class="comment"><h3>Comment by reader {n}</h3><div class="sectionbody"><p>Thanks, this answered my '
        f"question number {n} about line endings.</p></div></div>"
        for n in range(3)
    )
    page = (
        f"<html><head><title>Line endings</title></head><body>{header}"
        f'<div id="content">{sections}</div><div id="comments">{comments}</div></body></html>'
    ).encode()
    text = _text(get_parser("p.html")(page, "/eol.html"))
    assert all(prose in text for prose in _PROSE)
    assert "Everything about the Acme tools" not in text and "Acme Docs" not in text
    assert "Thanks, this answered" not in text


def test_html_name_line_heads_only_itself() -> None:
    # the extractor keeps the first sections' bodies without their headings: their text must not go under NAME
    def sect(heading: str, body: str) -> str:
        return f'<div class="sect1"><h2>{heading}</h2><div class="sectionbody">{body}</div></div>'

    para = '<div class="paragraph"><p>{}</p></div>'.format
    code = '<div class="listingblock"><div class="content"><pre><code>git eol status</code></pre></div></div>'
    page = (
        '<html><head><title>git-eol(1)</title></head><body class="manpage"><div id="header"><h1>git-eol(1) Manual '
        'Page</h1><h2>NAME</h2><div class="sectionbody"><p>git-eol - Reuse recorded line endings</p></div></div>'
        '<div id="content">'
        + sect("SYNOPSIS", '<div class="verseblock"><pre class="content">git eol [clear | status]</pre></div>')
        + sect("DESCRIPTION", para(_PROSE[0]) + para(_PROSE[1]))
        + sect("DISCUSSION", "".join(para(text) + code for text in _PROSE * 3))
        + "</div></body></html>"
    ).encode()
    doc = get_parser("p.html")(page, "/git-eol.html")
    name = [s for s in doc.sections if s.heading_path[:1] == ["NAME"]]
    assert [s.text for s in name] == ["git-eol - Reuse recorded line endings"]
    assert "git eol [clear | status]" in _text(doc) and _PROSE[1] in _text(doc)


_OPTIONS = [
    "Show blank object names for boundary commits, so that the lines a boundary commit brought are told apart at "
    "a glance from the lines of the commits after it in the range that was asked for on the command line.",
    "Do not treat root commits as boundaries, and show their object names as any other commit's; the setting "
    "blame.showRoot gives the same for every run without the option on the command line.",
    "Include additional statistics at the end of the output: how many commits were walked, how many blobs were "
    "read and how long the diff machinery took for the whole of the file given.",
    "Walk history forward instead of backward: instead of showing the revision in which a line appeared, this "
    "shows the last revision in which a line has existed, for the lines that are gone.",
]
_NAMES = ["--root", "--show-stats", "--reverse", "--porcelain", "--incremental", "--encoding", "--contents",
          "--date", "--progress", "--minimal", "--ignore-rev", "--color-lines", "--color-by-age", "--abbrev",
          "--show-name", "--show-number", "--show-email", "--first-parent", "--line-porcelain", "--since"]  # fmt: skip


def _one_list_page() -> bytes:
    """A manual page as asciidoc renders git-annotate(1): a short description, then one definition list of twenty
    options that holds most of the page's prose, the extractor's pick."""

    def sect(heading: str, body: str) -> str:
        return f'<div class="sect1"><h2>{heading}</h2><div class="sectionbody">{body}</div></div>'

    texts = (_OPTIONS * 5)[: len(_NAMES)]
    items = "".join(f'<dt class="hdlist1">{n}</dt><dd><p>{t}</p></dd>' for n, t in zip(_NAMES, texts, strict=True))
    return (
        '<html><head><title>git-annotate(1)</title></head><body class="manpage"><div id="header"><h1>git-annotate(1)'
        ' Manual Page</h1><h2>NAME</h2><div class="sectionbody"><p>git-annotate - Annotate file lines with commit '
        'information</p></div></div><div id="content">'
        + sect("SYNOPSIS", '<div class="verseblock"><pre class="content">git annotate [&lt;options&gt;]</pre></div>')
        + sect("DESCRIPTION", '<div class="paragraph"><p>Annotates each line in the given file.</p></div>')
        + sect("OPTIONS", f'<div class="dlist"><dl>{items}</dl></div>')
        + sect("SEE ALSO", '<div class="paragraph"><p><a href="git-blame.html">git-blame(1)</a></p></div>')
        + "</div></body></html>"
    ).encode()


def test_html_manual_page_whose_pick_is_one_list_keeps_its_name_line_and_headings() -> None:
    # the extractor keeps the options' definition list alone, without its heading: no section shape to match
    doc = get_parser("p.html")(_one_list_page(), "/git-annotate.html")
    assert doc.sections[0].heading_path == ["NAME"]
    assert doc.sections[0].text == "git-annotate - Annotate file lines with commit information"
    assert "Annotates each line in the given file." in _text(doc)
    options = [s for s in doc.sections if _OPTIONS[2] in s.text]
    assert options and options[0].heading_path[0] == "OPTIONS" and "--reverse" in options[0].heading_path[1]
    assert all(s.heading_path[0] == "OPTIONS" for s in doc.sections if _OPTIONS[0] in s.text)
    assert "git-annotate(1) Manual Page" not in _text(doc)


def test_html_article_picked_without_its_title_keeps_its_stories_beside_it_out() -> None:
    # a story right after its title, related stories in the same tag: the pick is the story alone
    story = "".join(f"<p>{text}</p>" for text in _PROSE)
    related = "".join(
        f'<div class="related"><h3>Another story {n}</h3><p>Read how reader {n} set up the line endings of a '
        f"shared repository for a team of twelve.</p></div>"
        for n in range(3)
    )
    page = (
        '<html><head><title>Line endings</title></head><body><h1 class="title">Line endings on Windows</h1>'
        f'<div class="wrap"><div class="story">{story}</div>{related}</div></body></html>'
    ).encode()
    doc = get_parser("p.html")(page, "/story.html")
    assert all(prose in _text(doc) for prose in _PROSE) and "Read how reader" not in _text(doc)
    assert not any("Another story 1" in s.heading_path for s in doc.sections)
