"""A private RabbitMQ node, started from Debian's ``rabbitmq-server`` package, as a test broker.

How this works:

- ``start()`` chooses three free loopback ports (AMQP, Erlang distribution and the node's own
  epmd), writes a fresh base directory (config, enabled plugins, mnesia, logs, feature flags,
  pid file, HOME), starts the node's own epmd and then the package's start script, each as
  the leader of a new session. Nothing is shared with a system RabbitMQ or with another test
  node: not the ports, not epmd (``ERL_EPMD_PORT``), not the Erlang cookie (HOME).
- Run as root, the node runs as the ``rabbitmq`` user, as Debian's wrapper script would arrange;
  the base directory is chowned to that user first. The wrapper itself is not used: it drops
  privileges with ``su``, which resets HOME, and it refuses to run as any other user.
- The node is ready when its AMQP port answers the AMQP 1.0 SASL protocol header with the same
  header, which proves the ``rabbitmq_amqp1_0`` plugin serves the listener. From launch to ready
  took 6.5-8 s on a 2-CPU VM (``start_seconds`` holds the measurement of each start); stopping
  takes about 1 s.
- ``stop()`` sends SIGTERM to the node's process group, waits up to 30 s, then SIGKILLs the
  group, and does the same for epmd. epmd is started here rather than by the VM because
  ``epmd -daemon`` leaves the group (setsid) and is orphaned. The VM's helpers
  (``erl_child_setup``, ``inet_gethost``, the disk monitor) also call setsid, so any process
  still carrying the node's markers in its environment (its node name, its epmd port) is found
  in ``/proc`` and ended too. When ``stop()`` returns, no process of the node is running;
  orphaned helpers may stay zombies for a moment, until PID 1 reaps them.
- With ``tls=`` (:class:`chaos.rabbitmq_tls.RabbitMQTls`) the node also has an ``amqps``
  listener on a fourth free port, which verifies client certificates against the given CA and
  offers SASL EXTERNAL; the users named by certificates are imported at boot. Such a node is
  ready when, on top, the TLS port completes a handshake verified against the CA and answers the
  SASL header through it, presenting the client certificate. The TLS listener costs no time
  that shows: 3.1-3.3 s a start against 3.0-3.3 s without, alternating on a 2-CPU VM.
  :func:`start_all` starts several nodes side by side, each on its own thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Final, Self

from chaos.net import free_port
from chaos.processes import find_processes, signal_all, stop_group, wait_gone
from chaos.rabbitmq_tls import PLUGIN, RabbitMQTls, config_lines, definitions

__all__ = [
    "AMQP_SASL_HEADER",
    "ERLANG_NO_BUSY_WAIT",
    "RabbitMQNode",
    "RabbitMQNodeError",
    "start_all",
]

AMQP_SASL_HEADER: Final = b"AMQP\x03\x01\x00\x00"
"""The protocol header an AMQP 1.0 client sends first when it wants SASL."""

_COMMAND: Final = "rabbitmq-server"
# The real start script in Debian's package; /usr/sbin/rabbitmq-server only wraps it with su.
_DEBIAN_SCRIPT: Final = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
# Non-root users on Debian have no /usr/sbin on PATH, so look there too.
_EXTRA_PATH: Final = ("/usr/sbin", "/usr/lib/rabbitmq/bin")
_RUN_AS: Final = "rabbitmq"
ERLANG_NO_BUSY_WAIT: Final = "+sbwt none +sbwtdcpu none +sbwtdio none"
"""Erlang VM flags that stop idle schedulers from spinning. By default the VM's schedulers
busy-wait for work after each burst; on a machine shared with other work (a CI runner, a test
suite's parallel workers, several nodes) that spinning takes CPU the rest needs: a
``rabbitmq-plugins`` call took 23 s with both cores busy elsewhere, 9 s with these flags.
RabbitMQ recommends ``+sbwt none`` for shared and virtualised hosts. The nodes and their
command-line tools run with them."""

_PLUGINS: Final = "[rabbitmq_amqp1_0].\n"
_PLUGINS_WITH_TLS: Final = f"[rabbitmq_amqp1_0,{PLUGIN}].\n"
_LEFTOVER_TIMEOUT: Final = 5.0


class RabbitMQNodeError(RuntimeError):
    """The node could not be started or stopped; the message includes the tail of its log."""


class RabbitMQNode:
    """A throw-away RabbitMQ node with the AMQP 1.0 plugin, listening on 127.0.0.1 only;
    with ``tls``, also over TLS with SASL EXTERNAL.

    No I/O happens in the constructor; ports are chosen by :meth:`start`. Use it as a context
    manager, or call :meth:`start` and :meth:`stop` (idempotent) yourself::

        with RabbitMQNode() as node:
            connect(node.url)

    Not thread-safe: start and stop it from one thread.
    """

    host: Final = "127.0.0.1"

    def __init__(self, *, keep_files: bool = False, tls: RabbitMQTls | None = None) -> None:
        """Prepare a node without starting it.

        Args:
            keep_files: Keep the base directory (logs, mnesia) after :meth:`stop`, for
                debugging. By default it is removed.
            tls: Also listen for ``amqps`` with these files and offer SASL EXTERNAL there
                (see :mod:`chaos.rabbitmq_tls`). The files are read at :meth:`start`.
        """
        self.keep_files = keep_files
        self.tls = tls
        self.start_seconds: float | None = None
        self._port: int | None = None
        self._tls_port: int | None = None
        self._dist_port: int | None = None
        self._epmd_port: int | None = None
        self._base: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._epmd: subprocess.Popen[bytes] | None = None

    # -- discovery -------------------------------------------------------------------------

    @staticmethod
    def available() -> bool:
        """Return whether ``rabbitmq-server`` is installed (on PATH, or in /usr/sbin)."""
        return _find_executable() is not None

    # -- addresses -------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The AMQP port on :attr:`host`.

        Raises:
            RabbitMQNodeError: The node has not been started.
        """
        if self._port is None:
            raise RabbitMQNodeError("the node has no port before start()")
        return self._port

    @property
    def url(self) -> str:
        """``amqp://guest:guest@127.0.0.1:<port>``; ``guest`` may log in over loopback."""
        return f"amqp://guest:guest@{self.host}:{self.port}"

    @property
    def tls_port(self) -> int:
        """The ``amqps`` port on :attr:`host`.

        Raises:
            RabbitMQNodeError: The node has no TLS listener, or has not been started.
        """
        if self.tls is None:
            raise RabbitMQNodeError("the node has no TLS listener: pass tls= to RabbitMQNode")
        if self._tls_port is None:
            raise RabbitMQNodeError("the node has no port before start()")
        return self._tls_port

    @property
    def amqps_url(self) -> str:
        """``amqps://127.0.0.1:<tls_port>``: no user, the client certificate names it.

        Raises:
            RabbitMQNodeError: The node has no TLS listener, or has not been started.
        """
        return f"amqps://{self.host}:{self.tls_port}"

    @property
    def node_name(self) -> str:
        """The Erlang node name, ``haclient-<port>@localhost``."""
        return f"haclient-{self.port}@localhost"

    @property
    def base_dir(self) -> Path | None:
        """The node's directory (config, logs, mnesia).

        None before start, and after stop unless ``keep_files`` keeps the directory.
        """
        return self._base

    @property
    def pid(self) -> int | None:
        """The pid of the launcher, the leader of the node's process group; None if not running."""
        return None if self._proc is None else self._proc.pid

    @property
    def vm_pid(self) -> int | None:
        """The pid of the Erlang VM (``beam.smp``), from the node's pid file; None if unknown."""
        if self._proc is None or self._base is None:
            return None
        try:
            return int((self._base / "rabbitmq.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    # -- lifetime --------------------------------------------------------------------------

    def start(self, timeout: float = 90.0) -> None:
        """Start the node and wait until it speaks AMQP 1.0.

        Args:
            timeout: Seconds to wait for the node to become ready.

        Raises:
            RabbitMQNodeError: RabbitMQ is not installed, the node is already started, or it
                died or did not become ready in time (the message has the tail of its log).
        """
        if self._proc is not None:
            raise RabbitMQNodeError(f"node {self.node_name} is already started")
        executable = _find_executable()
        if executable is None:
            raise RabbitMQNodeError(
                f"{_COMMAND} is not installed (Debian: apt-get install {_COMMAND})"
            )
        began = time.monotonic()
        try:
            self._choose_ports()
            env = self._write_base_dir()
            self._launch(executable, env)
            self._wait_ready(began + timeout)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began

    def stop(self) -> None:
        """Stop the node and every process it started, then remove its files.

        Sends SIGTERM to the node's process group, waits up to 30 s, then SIGKILLs the group;
        then stops the node's epmd the same way and ends any helper of the VM that left the
        group. Idempotent.

        Raises:
            RabbitMQNodeError: A process of the node survived SIGKILL.
        """
        proc, self._proc = self._proc, None
        epmd, self._epmd = self._epmd, None
        try:
            for leader in (proc, epmd):  # the node first: it talks to epmd until it is down
                if leader is not None:
                    stop_group(leader)
            if self._port is not None:
                self._end_leftovers()
        finally:
            if self._base is not None and not self.keep_files:
                shutil.rmtree(self._base, ignore_errors=True)
                self._base = None

    def pids(self) -> list[int]:
        """Pids of every process of this node: its launcher, the VM and its helpers, its epmd."""
        if self._port is None:
            return []
        pids = find_processes(self._markers())
        for leader in (self._proc, self._epmd):
            if leader is not None:
                pids |= find_processes(frozenset(), leader.pid)
        return sorted(pids)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "stopped" if self._proc is None else f"pid={self._proc.pid}"
        port = "?" if self._port is None else str(self._port)
        return f"<RabbitMQNode {self.host}:{port} {state}>"

    # -- start, step by step ---------------------------------------------------------------

    def _choose_ports(self) -> None:
        ports: set[int] = set()
        while len(ports) < (3 if self.tls is None else 4):
            ports.add(free_port(self.host))
        chosen = sorted(ports)
        self._port, self._dist_port, self._epmd_port = chosen[:3]
        self._tls_port = chosen[3] if self.tls is not None else None

    def _write_base_dir(self) -> dict[str, str]:
        """Create the base directory and return the environment that points the node at it."""
        base = Path(tempfile.mkdtemp(prefix=f"haclient-rabbitmq-{self.port}-"))
        self._base = base
        for sub in ("mnesia", "log", "home"):
            (base / sub).mkdir()
        config = (
            f"listeners.tcp.default = {self.host}:{self.port}\n"
            "loopback_users = none\n"
            "log.console = false\n"
            "log.file.level = info\n"
            # A test machine's disk may be nearly full; do not block publishers for it.
            "disk_free_limit.absolute = 1MB\n"
        )
        plugins = _PLUGINS
        if self.tls is not None:
            config += self._write_tls_files(self.tls, base)
            plugins = _PLUGINS_WITH_TLS
        (base / "rabbitmq.conf").write_text(config)
        (base / "enabled_plugins").write_text(plugins)
        # Empty, so that /etc/rabbitmq/rabbitmq-env.conf cannot override our settings.
        (base / "rabbitmq-env.conf").write_text("")
        if os.geteuid() == 0:
            _chown_tree(base, _RUN_AS)
        return self._environment(base)

    def _write_tls_files(self, tls: RabbitMQTls, base: Path) -> str:
        """Copy the PEM files and write the definitions; return the config lines for TLS."""
        files = base / "tls"
        files.mkdir()
        for source, name in (
            (tls.ca_file, "ca.pem"),
            (tls.cert_file, "server.pem"),
            (tls.key_file, "server.key"),
        ):
            try:
                shutil.copyfile(source, files / name)
            except OSError as exc:
                raise RabbitMQNodeError(f"cannot copy the node's TLS file: {exc}") from exc
        (files / "server.key").chmod(0o600)
        (base / "definitions.json").write_text(json.dumps(definitions(tls.users), indent=2))
        assert self._tls_port is not None
        return config_lines(tls, self.host, self._tls_port, files, base / "definitions.json")

    def _environment(self, base: Path) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("RABBITMQ_", "ERL_"))
        }
        env.update(
            HOME=str(base / "home"),
            RABBITMQ_NODENAME=self.node_name,
            RABBITMQ_DIST_PORT=str(self._dist_port),
            ERL_EPMD_PORT=str(self._epmd_port),
            ERL_EPMD_ADDRESS=self.host,
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=(
                f"-kernel inet_dist_use_interface {{127,0,0,1}} {ERLANG_NO_BUSY_WAIT}"
            ),
            RABBITMQ_CTL_ERL_ARGS=ERLANG_NO_BUSY_WAIT,
            RABBITMQ_CONF_ENV_FILE=str(base / "rabbitmq-env.conf"),
            RABBITMQ_CONFIG_FILE=str(base / "rabbitmq"),  # without ".conf", as documented
            RABBITMQ_ADVANCED_CONFIG_FILE=str(base / "advanced.config"),  # absent on purpose
            RABBITMQ_ENABLED_PLUGINS_FILE=str(base / "enabled_plugins"),
            RABBITMQ_FEATURE_FLAGS_FILE=str(base / "feature_flags"),
            RABBITMQ_MNESIA_BASE=str(base / "mnesia"),
            RABBITMQ_LOG_BASE=str(base / "log"),
            RABBITMQ_LOGS=str(base / "log" / "node.log"),
            RABBITMQ_PID_FILE=str(base / "rabbitmq.pid"),
            ERL_CRASH_DUMP=str(base / "log" / "erl_crash.dump"),
        )
        return env

    def _launch(self, executable: Path, env: dict[str, str]) -> None:
        """Start the node's own epmd, then the node, each as the leader of a new session."""
        assert self._base is not None
        epmd = shutil.which("epmd", path=env.get("PATH"))
        if epmd is not None:  # otherwise the VM starts epmd itself, as a daemon
            self._epmd = self._spawn([epmd], env, "epmd.log")
            self._wait_epmd(time.monotonic() + 10.0)
        self._proc = self._spawn([str(executable)], env, "console.log")

    def _spawn(self, argv: list[str], env: dict[str, str], log: str) -> subprocess.Popen[bytes]:
        assert self._base is not None
        uid = gid = None
        groups: list[int] | None = None
        if os.geteuid() == 0:
            account = _account(_RUN_AS)
            uid, gid, groups = account.pw_uid, account.pw_gid, []
        with (self._base / "log" / log).open("wb") as output:
            return subprocess.Popen(
                argv,
                env=env,
                cwd=self._base,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                user=uid,
                group=gid,
                extra_groups=groups,
            )

    def _wait_epmd(self, deadline: float) -> None:
        """Wait until our epmd listens, so that the VM does not start a second one."""
        assert self._epmd is not None and self._epmd_port is not None
        while self._epmd.poll() is None:
            try:
                # A NAMES_REQ (length 1, "n"); epmd answers with its port first.
                with socket.create_connection((self.host, self._epmd_port), timeout=1.0) as sock:
                    sock.sendall(b"\x00\x01n")
                    sock.settimeout(1.0)
                    if sock.recv(4):
                        return
            except OSError:
                pass  # not listening yet
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        raise RabbitMQNodeError(f"epmd for {self.node_name} did not start{self._tail()}")

    def _wait_ready(self, deadline: float) -> None:
        last = "no answer yet"
        probes: list[tuple[int, ssl.SSLContext | None]] = [(self.port, None)]
        if self.tls is not None:
            probes.append((self.tls_port, _client_context(self.tls)))
        while True:
            assert self._proc is not None
            code = self._proc.poll()
            if code is not None:
                raise RabbitMQNodeError(f"node {self.node_name} exited with {code}{self._tail()}")
            port, context = probes[0]
            answer = _probe(self.host, port, context)
            if answer == AMQP_SASL_HEADER:
                probes.pop(0)
                if not probes:
                    return
                continue
            if isinstance(answer, bytes):
                last = f"port {port} answered {answer!r}"
            elif answer is not None:
                last = f"port {port}: {answer}"
            if time.monotonic() >= deadline:
                raise RabbitMQNodeError(
                    f"node {self.node_name} not ready in time ({last}){self._tail()}"
                )
            time.sleep(0.25)

    def _tail(self, lines: int = 30) -> str:
        if self._base is None:
            return ""
        parts = []
        for name in ("epmd.log", "console.log", "node.log"):
            path = self._base / "log" / name
            try:
                text = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            parts.append(f"\n--- last lines of {path} ---\n" + "\n".join(text))
        return "".join(parts)

    # -- stop, step by step ----------------------------------------------------------------

    def _markers(self) -> frozenset[bytes]:
        return frozenset(
            {
                f"RABBITMQ_NODENAME={self.node_name}".encode(),
                f"ERL_EPMD_PORT={self._epmd_port}".encode(),
            }
        )

    def _end_leftovers(self) -> None:
        """End processes that outlived the group: epmd, and anything the VM left behind."""
        markers = self._markers()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = find_processes(markers)
            if not pids:
                return
            signal_all(pids, sig)
            if wait_gone(markers, _LEFTOVER_TIMEOUT):
                return
        survivors = find_processes(markers)
        raise RabbitMQNodeError(f"processes of {self.node_name} survived SIGKILL: {survivors}")


# -- helpers ------------------------------------------------------------------------------


def _find_executable() -> Path | None:
    if _DEBIAN_SCRIPT.is_file() and os.access(_DEBIAN_SCRIPT, os.X_OK):
        return _DEBIAN_SCRIPT
    path = os.pathsep.join([os.environ.get("PATH", os.defpath), *_EXTRA_PATH])
    found = shutil.which(_COMMAND, path=path)
    return None if found is None else Path(found)


def _account(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise RabbitMQNodeError(f"user {name!r} does not exist; is {_COMMAND} installed?") from None


def _chown_tree(root: Path, user: str) -> None:
    account = _account(user)
    for directory, subdirs, files in os.walk(root):
        os.chown(directory, account.pw_uid, account.pw_gid)
        for name in (*subdirs, *files):
            os.chown(os.path.join(directory, name), account.pw_uid, account.pw_gid)


def _client_context(tls: RabbitMQTls) -> ssl.SSLContext:
    """What the readiness probe trusts and presents on the TLS port."""
    try:
        context = ssl.create_default_context(cafile=tls.ca_file)
        if tls.client_cert_file is not None:
            context.load_cert_chain(tls.client_cert_file, tls.client_key_file)
    except (OSError, ssl.SSLError) as exc:  # ssl.SSLError is an OSError; named for the reader
        raise RabbitMQNodeError(f"cannot load the probe's CA or client certificate: {exc}") from exc
    return context


def _probe(host: str, port: int, context: ssl.SSLContext | None = None) -> bytes | str | None:
    """Send the AMQP 1.0 SASL header, through TLS with ``context``; return the 8-byte answer,
    the TLS error (a handshake failed: the node is up, the cause may be ours), or None if there
    is no answer."""
    try:
        with contextlib.ExitStack() as stack:
            sock = stack.enter_context(socket.create_connection((host, port), timeout=2.0))
            sock.settimeout(5.0)
            if context is not None:
                sock = stack.enter_context(context.wrap_socket(sock, server_hostname=host))
            sock.sendall(AMQP_SASL_HEADER)
            answer = b""
            while len(answer) < len(AMQP_SASL_HEADER):
                chunk = sock.recv(len(AMQP_SASL_HEADER) - len(answer))
                if not chunk:
                    return None
                answer += chunk
    except ssl.SSLError as exc:
        return f"TLS failed: {exc}"
    except OSError:
        return None
    return answer if answer.startswith(b"AMQP") else None


def start_all(nodes: Iterable[RabbitMQNode], timeout: float = 90.0) -> None:
    """Start ``nodes`` side by side, each on a thread of its own, and wait for all of them.

    Args:
        nodes: Nodes not started yet.
        timeout: Seconds each node may take to become ready.

    Raises:
        RabbitMQNodeError: A node did not start (the first such error); the nodes that did
            start are stopped again.
    """
    nodes = list(nodes)
    errors: list[BaseException] = []

    def start(node: RabbitMQNode) -> None:
        try:
            node.start(timeout)
        except BaseException as exc:  # raised below, on the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(node,)) for node in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        for node in nodes:
            node.stop()
        raise errors[0]
