"""Real Redis and PostgreSQL servers for the store tests, each in a temp dir on a free 127.0.0.1 port.

The binaries come from Debian packages (``scripts/test-deps`` installs ``redis-server`` and
``postgresql-15`` when missing). PostgreSQL refuses to run as root, so as root its commands run as
the ``postgres`` OS user through ``runuser -u postgres --``. Both are tuned for tests, not for
durability: Redis without persistence, PostgreSQL with ``fsync=off``.

    with run_redis() as redis_url, run_postgres() as postgres_url: ...
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

PG_BIN = Path(os.environ.get("OTELSIGNALS_PG_BIN", "/usr/lib/postgresql/15/bin"))
MISSING_HINT = "run scripts/test-deps (as root) to install it"


class ServerUnavailable(RuntimeError):
    pass


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


_PORTS = random.Random()  # seeded from the OS: concurrent test processes pick different ports


def free_port() -> int:
    """A loopback port nothing listens on, from below the kernel's ephemeral range: a port the kernel
    hands out (bind to 0) can meanwhile become the source port of some outgoing connection, and then
    a server that binds it, or binds it again after a restart, fails with "address in use"."""
    floor = _ephemeral_floor()
    for _ in range(200):
        port = _PORTS.randrange(10_000, floor)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port found between 10000 and {floor}")


def _wait_port(port: int, proc: subprocess.Popen[bytes] | None, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ServerUnavailable(f"{what} exited with status {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.02)
    raise ServerUnavailable(f"{what} did not listen on 127.0.0.1:{port} within {timeout} s")


@contextlib.contextmanager
def run_redis(timeout: float = 10.0) -> Iterator[str]:
    """A throwaway ``redis-server``; yields ``redis://127.0.0.1:<port>/0``."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServerUnavailable(f"redis-server is not installed: {MISSING_HINT}")
    with tempfile.TemporaryDirectory(prefix="otelsignals-redis-") as tmp:
        last_error: Exception | None = None
        for _ in range(3):  # the free port may be taken between picking it and binding it
            port = free_port()
            log = open(os.path.join(tmp, "redis.log"), "wb")  # noqa: SIM115 - closed below
            proc = subprocess.Popen(
                [
                    binary,
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    tmp,
                    "--daemonize",
                    "no",
                    "--protected-mode",
                    "no",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                _wait_port(port, proc, timeout, "redis-server")
            except ServerUnavailable as exc:
                last_error = exc
                _stop(proc)
                log.close()
                continue
            try:
                yield f"redis://127.0.0.1:{port}/0"
            finally:
                _stop(proc)
                log.close()
            return
        log_text = Path(tmp, "redis.log").read_text(errors="replace")[-2000:]
        raise ServerUnavailable(f"{last_error}\n{log_text}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _as_postgres(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


@contextlib.contextmanager
def run_postgres(timeout: float = 30.0) -> Iterator[str]:
    """A throwaway PostgreSQL cluster (``initdb`` + ``pg_ctl start``); yields its ``postgresql://`` URL."""
    initdb, pg_ctl = PG_BIN / "initdb", PG_BIN / "pg_ctl"
    if not (initdb.exists() and pg_ctl.exists()):
        raise ServerUnavailable(f"PostgreSQL 15 is not installed under {PG_BIN}: {MISSING_HINT}")
    tmp = tempfile.mkdtemp(prefix="otelsignals-pg-")
    data, log = os.path.join(tmp, "data"), os.path.join(tmp, "pg.log")
    try:
        if os.geteuid() == 0:
            shutil.chown(tmp, "postgres", "postgres")
        subprocess.run(
            _as_postgres(
                [str(initdb), "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"]
            ),
            check=True,
            capture_output=True,
            timeout=timeout,
        )
        last_error: Exception | None = None
        for _ in range(3):
            port = free_port()
            options = (
                f"-p {port} -k {tmp} -c listen_addresses=127.0.0.1 -c fsync=off"
                " -c synchronous_commit=off -c full_page_writes=off -c max_connections=50"
            )
            started = subprocess.run(
                _as_postgres([str(pg_ctl), "-D", data, "-l", log, "-o", options, "-w", "start"]),
                capture_output=True,
                timeout=timeout + 5,
            )
            if started.returncode == 0:
                break
            last_error = ServerUnavailable(
                f"pg_ctl start failed: {started.stderr.decode(errors='replace')}\n"
                + (Path(log).read_text(errors="replace")[-2000:] if os.path.exists(log) else "")
            )
        else:
            raise last_error or ServerUnavailable("pg_ctl start failed")
        try:
            _wait_port(port, None, timeout, "postgres")
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            subprocess.run(
                _as_postgres([str(pg_ctl), "-D", data, "-m", "immediate", "-w", "stop"]),
                capture_output=True,
                timeout=30,
            )
    except subprocess.CalledProcessError as exc:
        raise ServerUnavailable(f"initdb failed: {exc.stderr.decode(errors='replace')}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
