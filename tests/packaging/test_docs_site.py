"""The documentation site's include hook (docs/_hooks/include.py): guide pages take sections of
the README and docs/api.md, with links that work on the site. The strict
build itself runs in ``make test`` (``mkdocs build --strict``)."""

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
    assert len(includes) >= 15
    for source, title in includes:
        assert (ROOT / source).is_file(), source
        if title:
            assert hook.section(source, title).strip(), (source, title)


def test_item4_a_section_ends_at_its_next_sibling_and_its_subheadings_rise(tmp_path: Path) -> None:
    body = hook.section("README.md", "Chaos testing")
    assert body.startswith("`chaos.bed.Bed` puts brokers")
    assert "\n## A long run: 1,000 faults\n" in body  # was ###
    assert "\n## Benchmarks" not in body and "python -m bench.throughput" not in body
    with pytest.raises(ValueError, match="no section headed 'Nowhere'"):
        hook.section("README.md", "Nowhere")


def test_item4_links_are_rewritten_for_the_page() -> None:
    text = "[api](docs/api.md#metrics) [bench](bench/README.md) [web](https://example.com/x)"
    assert hook.relink(text, "README.md", "guide", "https://repo") == (
        "[api](../api.md#metrics) [bench](https://repo/blob/main/bench/README.md) "
        "[web](https://example.com/x)"
    )
    assert hook.relink("[r](rules.md)", "docs/api.md", "guide", "") == "[r](../rules.md)"
