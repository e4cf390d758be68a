"""A mkdocs hook: guide pages take sections of the README (and other files) instead of copies.

A line ``<!-- include README.md "Metrics" -->`` in a page becomes the body of the section headed
``Metrics`` in ``README.md`` (a path from the repository's root): everything after that heading
up to the next heading of the same or a higher level, its subheadings raised one level (the page's
own title stands for the section's). Without a title the whole file is taken (a file that is not
Markdown, as a Python code block). Links are rewritten
for the page: a link into ``docs/`` points at that page of the site, any other file of the
repository at its source (``repo_url``). A missing file or section fails the build. A chaos
run's report (``docs/chaos-runs/``) gets its plot of failover durations at its end.

In a table, inline code may break after a dot, a slash or an underscore only (``<wbr>``), so
that a dotted name (``jms.prefetchPolicy.all``) wraps where it reads well and a package name
(``haclient[metrics]``) never breaks; the site's CSS allows no other break in code.

Every warning stays one: a docstring's ``Raises:`` entry is an ``Error: description`` pair, as
griffe reads it (``make docs-check`` fails on any warning of the build).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOCS = "docs/"
_INCLUDE = re.compile(r'^<!-- include (\S+)(?: "([^"]+)")? -->$', re.M)
_HEADING = re.compile(r"^(#{1,6}) (.+)$")
_LINK = re.compile(r"\]\(([^)\s#]+)(#[^)\s]*)?\)")
_FENCE = re.compile(r"^```")
_CELL = re.compile(r"<td>.*?</td>", re.S)
_CELL_CODE = re.compile(r"<code>([^<]*)</code>")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace every include line of ``page`` with the section it names."""
    page_dir = posixpath.dirname(page.file.src_uri)
    repo_url = str(config.get("repo_url") or "").rstrip("/")

    def include(match: re.Match[str]) -> str:
        source, title = match.group(1), match.group(2)
        if not source.endswith(".md"):  # a program: shown whole, as code
            return f"```python\n{(ROOT / source).read_text().rstrip()}\n```"
        text = section(source, title) if title else (ROOT / source).read_text()
        return relink(text, source, page_dir, repo_url)

    return with_plot(_INCLUDE.sub(include, markdown), page.file.src_uri)


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """Inline code in table cells gets a break opportunity after each dot, slash and underscore."""
    return _CELL.sub(lambda cell: _CELL_CODE.sub(_breakable, cell.group(0)), html)


def _breakable(code: re.Match[str]) -> str:
    return "<code>" + re.sub(r"([./_])(?=\w)", r"\1<wbr>", code.group(1)) + "</code>"


def with_plot(markdown: str, src_uri: str) -> str:
    """A chaos run's report (``chaos-runs/NAME.md``) with its failover-duration plot
    (``NAME-failovers.png``, written beside it by the same run) shown at its end."""
    folder, name = posixpath.split(src_uri)
    plot = f"{posixpath.splitext(name)[0]}-failovers.png"
    if folder != "chaos-runs" or not (ROOT / DOCS / folder / plot).is_file():
        return markdown
    image = f"![Failover durations of this run]({plot})"
    return f"{markdown.rstrip()}\n\n## Failover durations\n\n{image}\n"


def section(source: str, title: str) -> str:
    """The body of the section headed ``title`` in ``source``, subheadings raised one level."""
    lines = (ROOT / source).read_text().splitlines()
    level, body, in_fence = 0, [], False
    for line in lines:
        if _FENCE.match(line):
            in_fence = not in_fence
        heading = None if in_fence else _HEADING.match(line)
        if level == 0:
            if heading and heading.group(2).strip() == title:
                level = len(heading.group(1))
            continue
        if heading and len(heading.group(1)) <= level:
            break
        body.append(line[1:] if heading else line)
    if level == 0:
        raise ValueError(f"{source} has no section headed {title!r}")
    return "\n".join(body).strip("\n") + "\n"


def relink(text: str, source: str, page_dir: str, repo_url: str) -> str:
    """Links of ``text``, written relative to ``source``, made relative to the page."""
    source_dir = posixpath.dirname(source)

    def fix(match: re.Match[str]) -> str:
        target, anchor = match.group(1), match.group(2) or ""
        if re.match(r"[a-z]+:", target):  # http:, mailto: ...
            return match.group(0)
        path = posixpath.normpath(posixpath.join(source_dir, target))
        if path.startswith(DOCS):
            return f"]({posixpath.relpath(path[len(DOCS) :], page_dir or '.')}{anchor})"
        return f"]({repo_url}/blob/main/{path}{anchor})"

    return _LINK.sub(fix, text)
