"""The RabbitMQ test node itself: it speaks AMQP 1.0 and leaves no process behind."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from chaos.rabbitmq import AMQP_SASL_HEADER, RabbitMQNode

pytestmark = pytest.mark.rabbitmq


def _is_running(pid: int) -> bool:
    """Whether ``pid`` is a live process; a zombie (dead, not yet reaped) is not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(b")") + 2 :].split(b" ", 1)[0] != b"Z"


def test_node_answers_the_amqp_1_0_sasl_header(rabbitmq: RabbitMQNode) -> None:
    with socket.create_connection((rabbitmq.host, rabbitmq.port), timeout=10) as sock:
        sock.settimeout(10)
        sock.sendall(AMQP_SASL_HEADER)
        answer = b""
        while len(answer) < 8:
            chunk = sock.recv(8 - len(answer))
            assert chunk, f"connection closed after {answer!r}"
            answer += chunk
    assert answer == AMQP_SASL_HEADER
    assert rabbitmq.url == f"amqp://guest:guest@127.0.0.1:{rabbitmq.port}"


@pytest.mark.slow
@pytest.mark.usefixtures("rabbitmq_installed")
def test_stop_leaves_no_process_behind() -> None:
    node = RabbitMQNode()
    with node:
        launcher, vm = node.pid, node.vm_pid
        assert launcher is not None and vm is not None
        pids = node.pids()
        assert {launcher, vm} <= set(pids)
        assert len(pids) >= 3, "expected at least the launcher, the VM and epmd"
    for pid in (launcher, vm):  # our child and its child: both reaped, so gone entirely
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert [pid for pid in pids if _is_running(pid)] == []
    assert node.pids() == []
    assert node.base_dir is None
