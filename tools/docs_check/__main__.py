"""``python -m tools.docs_check``: build the site, open every page in headless Chromium, fail on
what a reader would meet (``tools.docs_check.detect`` says what counts).

Run by ``make docs-check`` (and so by ``.ci/run``). The browser is Debian's ``chromium``
(``/usr/bin/chromium``, which the Makefile installs), driven by Playwright; nothing is
downloaded. The site is served from this process on a free loopback port and the server is
shut down when the check ends, however it ends.
"""

from __future__ import annotations

import argparse
import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from tools.docs_check.detect import (
    Box,
    broken_links,
    build_warnings,
    list_as_paragraph,
    overflows,
    scan,
)

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WIDTH, HEIGHT = 1280, 900
# The pages a reviewer looks at first: site file -> screenshot name.
SCREENSHOTS = {
    "index.html": "index.png",
    "guide/getting-started/index.html": "getting-started.png",
    "api/index.html": "api.png",
    "semantics/index.html": "semantics.png",
    "guide/security/index.html": "guide-security.png",
}
# What the browser measures on a page: the content column's right edge, every code block,
# table and image in it (their widths and right edges), and whether each image loaded.
MEASURE = """() => {
  const column = document.querySelector('.md-content');
  const inner = document.querySelector('.md-content__inner');
  if (!column || !inner) return null;
  const label = (el) => (el.textContent || el.getAttribute('src') || '').trim()
      .split('\\n')[0].slice(0, 70);
  const boxes = [];
  for (const el of inner.querySelectorAll(
      'pre > code, .md-typeset__scrollwrap, table:not(.md-typeset__scrollwrap table), img')) {
    const rect = el.getBoundingClientRect();
    if (rect.width === 0 && rect.height === 0) continue;  // not shown (a closed <details>)
    const kind = el.tagName === 'CODE' ? 'code block' : el.tagName === 'IMG' ? 'image' : 'table';
    boxes.push({what: `${kind} "${label(el)}"`, scroll: el.scrollWidth,
                client: el.clientWidth, right: rect.right});
  }
  const images = [...document.images].filter((i) => !i.complete || i.naturalWidth === 0)
      .map((i) => i.getAttribute('src'));
  return {right: column.getBoundingClientRect().right, boxes, images};
}"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.docs_check", description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "docs-check")
    parser.add_argument("--chromium", default=CHROMIUM, help=f"the browser ({CHROMIUM})")
    args = parser.parse_args(argv)
    started = time.monotonic()
    out: Path = args.out
    site = out / "site"
    problems = build(site, out / "build.log")
    pages = sorted(str(p.relative_to(site)) for p in site.rglob("*.html"))
    problems += static_problems(site, pages)
    problems += browse(site, pages, out, args.chromium)
    report = out / "problems.txt"
    report.write_text("".join(f"{p}\n" for p in problems))
    took = time.monotonic() - started
    if problems:
        print(f"docs-check: {len(problems)} problems in {took:.0f} s:", *problems, sep="\n  ")
        return 1
    print(f"docs-check: {len(pages)} pages, no problems, in {took:.0f} s; screenshots in {out}")
    return 0


def build(site: Path, log: Path) -> list[str]:
    """Build the site into ``site``; every warning line of the build's log is a problem."""
    print(f"docs-check: building the site into {site}", flush=True)
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--clean", "--site-dir", str(site)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(done.stdout + done.stderr)
    problems = [f"build: {line}" for line in build_warnings(done.stdout + done.stderr)]
    if done.returncode != 0:
        problems.append(f"build: mkdocs exited {done.returncode} (see {log})")
        raise SystemExit("docs-check: the build failed:\n  " + "\n  ".join(problems))
    return problems


def static_problems(site: Path, pages: list[str]) -> list[str]:
    """Rules 1 and 3 on every page's HTML."""
    scanned = {page: scan((site / page).read_text(encoding="utf-8")) for page in pages}
    ids = {page: found.ids for page, found in scanned.items()}
    problems = []
    for page, found in scanned.items():
        for text in found.paragraphs:
            line = list_as_paragraph(text)
            if line is not None:
                problems.append(f"{page}: a list rendered as a paragraph: {line[:90]!r}")
        for link in broken_links(page, found.urls, site, ids):
            problems.append(f"{page}: broken link {link}")
    return problems


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the site quietly, remembering every path it could not find."""

    missing: list[str]

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        self.missing.append(f"{code} {self.path}")
        super().send_error(code, message, explain)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serve(site: Path) -> Iterator[tuple[str, list[str]]]:
    """The site served on a free loopback port: its base URL and the paths it answered 4xx/5xx
    to. The server is shut down on the way out."""
    missing: list[str] = []
    handler = type("Handler", (_Handler,), {"missing": missing})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(handler, directory=str(site))
    )
    thread = threading.Thread(target=server.serve_forever, name="docs-check-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", missing
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def browse(site: Path, pages: list[str], out: Path, chromium: str) -> list[str]:
    """Rules 2 and 3 in the browser: every page opened at 1280 px; screenshots of the main ones."""
    from playwright.sync_api import sync_playwright  # the docs extra

    if not Path(chromium).is_file():
        return [f"no browser at {chromium}: `make docs-check` installs Debian's chromium"]
    problems: list[str] = []
    with serve(site) as (base, missing), sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
            for number, name in enumerate(pages, 1):
                before, seen = len(missing), len(problems)
                page.goto(base + name.removesuffix("index.html"), wait_until="load")
                problems += measured_problems(name, page.evaluate(MEASURE))
                problems += [f"{name}: the server answered {m}" for m in missing[before:]]
                if name in SCREENSHOTS:
                    page.screenshot(path=str(out / SCREENSHOTS[name]))
                found = len(problems) - seen
                verdict = "ok" if found == 0 else f"{found} problems"
                print(f"docs-check: [{number:2}/{len(pages)}] {name}: {verdict}", flush=True)
        finally:
            browser.close()
    return problems


def measured_problems(page: str, measured: dict[str, Any] | None) -> list[str]:
    """The overflows and broken images the browser measured on ``page``."""
    if measured is None:
        return [] if page in ("404.html",) else [f"{page}: no content column found"]
    problems = []
    for raw in measured["boxes"]:
        box = Box(raw["what"], raw["scroll"], raw["client"], raw["right"])
        if overflows(box, measured["right"]):
            problems.append(
                f"{page}: {box.what} is wider than the content column at {WIDTH} px "
                f"({box.scroll_width} px in {box.client_width} px, right edge {box.right:.0f} "
                f"of {measured['right']:.0f})"
            )
    problems += [f"{page}: image {src} did not load" for src in measured["images"]]
    return problems


if __name__ == "__main__":
    sys.exit(main())
