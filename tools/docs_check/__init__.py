"""``make docs-check``: the documentation site built, then every page opened in headless Chromium.

``python -m tools.docs_check`` builds the site with mkdocs (its log kept), serves it on a free
loopback port, opens every page at 1280 px in Debian's Chromium (driven by Playwright, never a
downloaded browser) and fails on what a reader would meet: a list rendered as a paragraph, a
code block or table wider than the content column, a broken internal link or image, a warning
of the build (mkdocstrings' and griffe's included). Screenshots of the main pages land in
``build/docs-check/`` for a reviewer.

``detect`` holds the decisions (pure functions over HTML, text and measurements, unit-tested
on small fixtures); ``__main__`` does the building, serving and browsing.
"""
