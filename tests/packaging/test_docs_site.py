"""The documentation site's include hook (docs/_hooks/include.py): guide pages take sections of
docs/api.md and whole programs of examples/, with links that work on the site; a chaos run's
page shows its plot. The strict build itself runs in ``make test`` (``mkdocs build --strict``),
and every page is opened in a browser by ``make docs-check``."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("include_hook", ROOT / "docs/_hooks/include.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hook = _hook()


def test_item4_every_include_of_the_guide_finds_its_section() -> None:
    includes = [
        match.groups()
        for page in (ROOT / "docs").rglob("*.md")
        for match in re.finditer(r'^<!-- include (\S+)(?: "([^"]+)")? -->$', page.read_text(), re.M)
    ]
    assert len(includes) >= 5
    for source, title in includes:
        assert (ROOT / source).is_file(), source
        if title:
            assert hook.section(source, title).strip(), (source, title)


def test_item4_a_section_ends_at_its_next_sibling_and_its_subheadings_rise(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n## Chaos testing\n\nThe bed.\n\n```sh\n# not a heading\n```\n\n"
        "### A long run\n\nRuns.\n\n## Benchmarks\n\nbench\n"
    )
    body = hook.section(str(page), "Chaos testing")
    assert body.startswith("The bed.")
    assert "\n## A long run\n" in body  # was ###
    assert "# not a heading" in body  # a code block's line is no heading
    assert "Benchmarks" not in body and "bench" not in body
    with pytest.raises(ValueError, match="no section headed 'Nowhere'"):
        hook.section(str(page), "Nowhere")


def test_a_chaos_run_page_shows_its_plot() -> None:
    runs = sorted((ROOT / "docs" / "chaos-runs").glob("20*.md"))
    assert runs
    for run in runs:
        shown = hook.with_plot("# report\n", f"chaos-runs/{run.name}")
        plot = f"{run.stem}-failovers.png"
        if "reported (ledger): 0\n" in run.read_text():  # no failover to plot (app kills)
            assert not (run.parent / plot).exists() and shown == "# report\n", run.name
            continue
        assert (run.parent / plot).is_file(), run.name
        assert shown.endswith(f"![Failover durations of this run]({plot})\n")
    assert hook.with_plot("# api\n", "api.md") == "# api\n"


def test_item4_links_are_rewritten_for_the_page() -> None:
    text = "[api](docs/api.md#metrics) [bench](bench/README.md) [web](https://example.com/x)"
    assert hook.relink(text, "README.md", "guide", "https://repo") == (
        "[api](../api.md#metrics) [bench](https://repo/blob/main/bench/README.md) "
        "[web](https://example.com/x)"
    )
    assert hook.relink("[r](rules.md)", "docs/api.md", "guide", "") == "[r](../rules.md)"
