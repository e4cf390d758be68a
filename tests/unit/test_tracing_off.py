"""Rule O4: a connection that does not trace never imports OpenTelemetry."""

from __future__ import annotations

import subprocess
import sys

_PROGRAM = """
import sys
import haclient, haclient.aio
from haclient.aio import ConnectionFactory
factory = ConnectionFactory("amqp://127.0.0.1:1", tracing="noop")
assert factory.options.tracing == "noop"
print(sorted(name for name in sys.modules if name.split(".")[0] == "opentelemetry"))
"""


def test_O4_the_client_imports_no_opentelemetry_unless_asked_to_trace() -> None:
    ran = subprocess.run(
        [sys.executable, "-c", _PROGRAM], capture_output=True, text=True, timeout=60, check=True
    )
    assert ran.stdout.strip() == "[]", ran.stderr


def test_O4_jms_tracing_takes_qpid_jms_names_and_refuses_others() -> None:
    from haclient.aio import ConnectionFactory
    from haclient.errors import ConfigurationError

    url = "amqp://127.0.0.1:1?jms.tracing="
    assert ConnectionFactory(url + "OpenTelemetry").options.tracing == "opentelemetry"
    assert ConnectionFactory(url + "opentracing").options.tracing == "opentracing"
    try:
        ConnectionFactory(url + "zipkin")
    except ConfigurationError as exc:
        assert "jms.tracing" in str(exc)
    else:
        raise AssertionError("jms.tracing=zipkin was accepted")
