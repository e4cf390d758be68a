"""The pytest plugin imports only pytest; each fixture imports the bed when a test uses it,
so the plugin never changes a test run that does not use it."""

from __future__ import annotations

import json
import subprocess
import sys

LIST_MODULES = """
import json, sys
import chaos.pytest_plugin
print(json.dumps(sorted(sys.modules)))
"""


def test_item1_loading_the_plugin_imports_no_bed_and_no_third_party_module() -> None:
    done = subprocess.run(
        [sys.executable, "-c", LIST_MODULES], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout))
    heavy = {"chaos.bed", "chaos.broker", "chaos.toxiproxy", "toxiproxy", "requests", "haclient"}
    assert loaded & heavy == set()
    assert "pytest" in loaded
