"""``python -m bench.jms`` over TLS, in a tiny configuration: the reference broker serves TLS
only, so every phase that completes (the run checks each one) proves that haclient and proton
both connected, each verifying the certificate made for the run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_tls_target_runs_both_clients_over_tls(tmp_path: Path) -> None:
    out = tmp_path / "jms.json"
    argv = [sys.executable, "-m", "bench.jms", "--count", "100", "--pipelined-count", "200"]
    argv += ["--rounds", "1", "--warmup", "0", "--no-reference", "--no-activemq-mode"]
    argv += ["--no-rabbitmq", "--no-blocking", "--json", str(out)]
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert run.returncode == 0, run.stderr[-3000:]
    document = json.loads(out.read_text())
    assert document["config"]["tls"] is True
    measured = {(m["broker"], m["test"], m["impl"]) for m in document["measurements"]}
    for test in ("sync send", "pipelined send", "receive AUTO"):
        for impl in ("haclient", "proton"):
            assert ("reference-tls", test, impl) in measured
    # the like-for-like reference: the Container sending haclient's message shape
    assert ("reference-tls", "pipelined JMS-shaped", "proton") in measured
    alike = document["summary"]["reference-tls"]["like_for_like"]
    assert alike["container_msgs_per_s"] > 0 and alike["haclient_over_container"] > 0
