"""``make docs-check``'s decisions (tools/docs_check/detect.py) on small pages: what a reader
would meet is found, and what reads fine is not."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# tools/ is no installed package: load the module from its file, as tests/packaging loads the
# docs hook.
_PATH = Path(__file__).resolve().parents[2] / "tools" / "docs_check" / "detect.py"
_SPEC = importlib.util.spec_from_file_location("docs_check_detect", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
detect = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = detect  # dataclasses look their module up
_SPEC.loader.exec_module(detect)
Box, broken_links, build_warnings = detect.Box, detect.broken_links, detect.build_warnings
list_as_paragraph, overflows, page_path, scan = (
    detect.list_as_paragraph,
    detect.overflows,
    detect.page_path,
    detect.scan,
)

# Python-Markdown's output for "What happens:\n- one\n- two" (no blank line before the list),
# beside a list done right, a list item with a nested list run into it, and code.
PAGE = """<html><body><nav><p>Menu:
- not in the article</p></nav>
<article class="md-content__inner md-typeset">
<h1 id="title">Title</h1>
<p>What happens when the broker goes away:
- Calls that need the network block.
- The default schedule is made for HA pairs.</p>
<p>A list done right:</p>
<ul>
<li>one</li>
<li>two:
- a nested item without its indentation<ul><li>a real nested item</li></ul></li>
</ul>
<p>Prose with a dash - in the middle of a line,
and a range 1-2 at the start of the next.</p>
<pre><code>items:
- in a code block, fine
</code></pre>
<p><a href="../other/#part">other</a> <img src="plot.png"> <a href="#title">up</a>
<a href="https://example.com/x">out</a> <a href="#nowhere">gone</a></p>
</article></body></html>
"""


def test_a_list_run_into_a_paragraph_is_found_and_prose_is_not() -> None:
    found = [line for text in scan(PAGE).paragraphs if (line := list_as_paragraph(text))]
    assert found == [
        "- Calls that need the network block.",
        "- a nested item without its indentation",
    ]


def test_a_list_whose_lines_were_run_together_is_found_after_a_colon() -> None:
    assert list_as_paragraph("It goes away: - Calls block. - The schedule waits.") is not None
    assert list_as_paragraph("It goes away: 1. first 2. second") is not None
    assert list_as_paragraph("A range: 5 - 10 seconds.") is None
    assert list_as_paragraph("one line only") is None


def test_an_ordered_list_run_into_a_paragraph_is_found() -> None:
    assert list_as_paragraph("The plan:\n1. The first attempt.\n2. The next.") == (
        "1. The first attempt."
    )


def test_links_to_missing_files_and_anchors_are_broken(tmp_path: Path) -> None:
    (tmp_path / "page").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "page" / "index.html").write_text(PAGE)
    (tmp_path / "other" / "index.html").write_text('<h2 id="part">Part</h2>')
    ids = {"page/index.html": scan(PAGE).ids, "other/index.html": {"part"}}
    urls = scan(PAGE).urls
    assert broken_links("page/index.html", urls, tmp_path, ids) == [
        "plot.png (no page/plot.png)",
        "#nowhere (no #nowhere in page/index.html)",
    ]
    (tmp_path / "page" / "plot.png").write_bytes(b"png")
    ids["other/index.html"].discard("part")
    assert broken_links("page/index.html", urls, tmp_path, ids) == [
        "../other/#part (no #part in other/index.html)",
        "#nowhere (no #nowhere in page/index.html)",
    ]
    assert broken_links("index.html", ["../../etc/passwd"], tmp_path, ids) == [
        "../../etc/passwd (outside the site)"
    ]


def test_page_paths_are_the_files_the_server_sends() -> None:
    assert page_path("/") == "index.html"
    assert page_path("/guide/getting-started/") == "guide/getting-started/index.html"
    assert page_path("/chaos-runs/run%20one-failovers.png") == "chaos-runs/run one-failovers.png"


def test_a_box_wider_than_its_content_or_past_the_column_overflows() -> None:
    assert not overflows(Box("code", 688, 688, 984), column_right=1008)
    assert not overflows(Box("code", 688.6, 688, 1008.4), column_right=1008)  # rounding
    assert overflows(Box("code", 842, 688, 984), column_right=1008)  # scrolls sideways
    assert overflows(Box("table", 865, 865, 1145), column_right=1008)  # sticks out


def test_every_warning_line_of_the_build_counts_griffes_included() -> None:
    log = (
        "INFO    -  Building documentation...\n"
        "WARNING -  griffe: haclient/x.py:3: Failed to get 'exception: description' pair\n"
        "INFO    -  Documentation built in 2.1 seconds\n"
        "ERROR   -  Config value 'nav': a page is missing\n"
        "A WARNING inside a sentence is not a log line\n"
    )
    assert build_warnings(log) == [
        "WARNING -  griffe: haclient/x.py:3: Failed to get 'exception: description' pair",
        "ERROR   -  Config value 'nav': a page is missing",
    ]
