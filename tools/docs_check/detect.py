"""What ``make docs-check`` counts as a problem: pure decisions over a page's HTML, the build log
and the browser's measurements. No I/O here but reading the built files named to ``links``.

Rule 1. A list a reader sees as a paragraph: a ``<p>`` (or a list item's own text) with a line
    that starts with a list marker (``- ``, ``* ``, ``+ ``, ``1. ``), as Python-Markdown leaves
    a list that has no blank line before it; or, with the lines run together, a colon followed
    by two or more `` - `` items.
Rule 2. An overflow: a code block or table whose content is wider than its box (it scrolls
    sideways), or an element whose right edge passes the content column's.
Rule 3. A broken link: an internal ``href`` or ``src`` whose file is not in the site, or whose
    ``#anchor`` is no ``id`` of the page it points at.
Rule 4. A build warning: any ``WARNING`` (or ``ERROR``) line of mkdocs' log, griffe's included.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

# Rule 1: a line that starts a list item; a colon, then two items run together on one line.
_ITEM_LINE = re.compile(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+\S")
_RUN_TOGETHER = re.compile(r":\s+(?:[-*+]|\d{1,3}[.)])\s+\S.*?\s(?:[-*+]|\d{1,3}[.)])\s+\S")
# Rule 4.
_WARNING = re.compile(r"^\s*(?:WARNING|ERROR)\b")

# Tags whose text is code or not prose: their text is kept out of rule 1's paragraphs.
_NOT_PROSE = {"pre", "script", "style"}
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}


def list_as_paragraph(text: str) -> str | None:
    """The line of ``text`` (a paragraph's) that shows a list run into it, else None (rule 1)."""
    lines = text.split("\n")
    for line in lines[1:]:
        if _ITEM_LINE.match(line):
            return line.strip()
    flat = " ".join(line.strip() for line in lines)
    found = _RUN_TOGETHER.search(flat)
    return found.group(0) if found else None


def build_warnings(log: str) -> list[str]:
    """Every warning or error line of a build log (rule 4)."""
    return [line.strip() for line in log.splitlines() if _WARNING.match(line)]


@dataclass(frozen=True)
class Box:
    """One element as the browser measured it: its content and box widths, its right edge."""

    what: str
    scroll_width: float
    client_width: float
    right: float


def overflows(box: Box, column_right: float) -> bool:
    """Whether ``box`` is wider than its box or passes the column's right edge (rule 2).

    One pixel of slack: layouts round sub-pixel widths either way."""
    return box.scroll_width > box.client_width + 1 or box.right > column_right + 1


@dataclass
class Page:
    """What rules 1 and 3 read of one page: its prose, its ids and the URLs it refers to."""

    paragraphs: list[str] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    urls: list[str] = field(default_factory=list)


class _Scanner(HTMLParser):
    """Collects a page's paragraphs (and list items' own text) inside its article, every id,
    and every ``href`` and ``src``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = Page()
        self._stack: list[str] = []
        self._article_depth: int | None = None
        self._texts: list[tuple[str, list[str]]] = []  # open <p> and <li>: their text so far

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        for name in ("id", "name") if tag == "a" else ("id",):
            if values.get(name):
                self.page.ids.add(values[name])
        for name in ("href", "src"):
            if values.get(name) and not (tag == "link" and "preconnect" in values.get("rel", "")):
                self.page.urls.append(values[name])
        if tag in _VOID:
            return
        self._stack.append(tag)
        if self._article_depth is None and tag == "article":
            self._article_depth = len(self._stack)
        if self._article_depth is not None and tag in ("p", "li"):
            self._texts.append((tag, []))

    def handle_endtag(self, tag: str) -> None:
        if tag not in self._stack:
            return
        while self._stack:
            closed = self._stack.pop()
            if self._texts and closed == self._texts[-1][0]:
                self.page.paragraphs.append("".join(self._texts.pop()[1]))
            if self._article_depth is not None and len(self._stack) < self._article_depth:
                self._article_depth = None
            if closed == tag:
                break

    def handle_data(self, data: str) -> None:
        if not self._texts or any(tag in _NOT_PROSE for tag in self._stack):
            return
        # A list item's own text: not that of a list or paragraph nested in it.
        inner = self._stack[len(self._stack) - 1]
        if self._texts[-1][0] == "li" and inner in ("ul", "ol"):
            return
        self._texts[-1][1].append(data)


def scan(html: str) -> Page:
    """Rules 1 and 3's view of one page."""
    scanner = _Scanner()
    scanner.feed(html)
    scanner.close()
    return scanner.page


def page_path(url_path: str) -> str:
    """The site file a URL path serves (``guide/`` -> ``guide/index.html``), without a slash."""
    path = unquote(url_path).lstrip("/")
    return path + "index.html" if path == "" or path.endswith("/") else path


def broken_links(page: str, urls: list[str], site: Path, ids: dict[str, set[str]]) -> list[str]:
    """The internal URLs of ``page`` (a site file, as ``api/index.html``) that lead nowhere:
    no such file, or no such ``#anchor`` in it (rule 3). ``ids`` maps site files to their ids;
    a file missing from it is not HTML, and its anchors are not checked."""
    broken = []
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme or parts.netloc or url.startswith(("mailto:", "javascript:")):
            continue  # external: not this site's to check
        if parts.path:
            joined = posixpath.join(posixpath.dirname(page), unquote(parts.path))
            target = posixpath.normpath(joined)
            if parts.path.endswith("/"):
                target += "/"
            if target.startswith(".."):
                broken.append(f"{url} (outside the site)")
                continue
            target = page_path(target if target != "." else "")
            if (site / target).is_dir():
                target = page_path(target + "/")
        else:
            target = page
        if not (site / target).is_file():
            broken.append(f"{url} (no {target})")
        elif parts.fragment and target in ids and unquote(parts.fragment) not in ids[target]:
            broken.append(f"{url} (no #{unquote(parts.fragment)} in {target})")
    return broken
