"""How long an export stalls the event loop the receivers run on: OTLP/HTTP with gzip and without,
and the file output (no endpoint).

    python bench/export_loop_stall.py

The sidecar's exporter sends on the same asyncio event loop as its OTLP receivers and admin API.
Five requests of 4 MiB (an exporter batch, ``exporter.batch.max_bytes``: the agent workload's
requests of ``bench/agent_workload.py`` merged) go one after another through ``HttpSender`` to a
stdlib HTTP server in another process, then through ``FileSender`` to a temporary file; meanwhile
a task on the loop sleeps 1 ms at a time and records the longest time it waited beyond that: the
longest a request arriving at a receiver would have waited for the loop. Also the gzip figures of
the workload's requests (one turn each): zlib at level 6 (grpc's fixed level) and level 1, and
ISA-L's level 1 (``senders.gzip_fast``, what the sidecar's own gzip uses).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from bench.agent_workload import build_workload
from otelsignals.config import ExporterConfig
from otelsignals.pipeline.senders import FileSender, HttpSender, Sender, gzip_fast
from tests.support.sidecar import free_port

CALLS = 5


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def serve(port: int) -> None:
    ThreadingHTTPServer(("127.0.0.1", port), _Sink).serve_forever()


async def loop_stall(sender: Sender, body: bytes) -> tuple[float, float]:
    """(seconds the sends took, the event loop's longest delay meanwhile)."""
    worst = 0.0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal worst
        while not done.is_set():
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - before - 0.001)

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0.002)  # the ticker sleeping first: a send that never yields is measured too
    started = time.perf_counter()
    for _ in range(CALLS):
        result = await sender.send("traces", body)
        assert result.ok, result
    took = time.perf_counter() - started
    done.set()
    await ticking
    return took, worst


async def stalls(port: int, body: bytes, directory: str) -> list[tuple[str, float, float]]:
    rows = []
    for compression in ("gzip", "none"):
        config = ExporterConfig(endpoint=f"http://127.0.0.1:{port}", protocol="http/protobuf")
        config.compression = compression  # type: ignore[assignment]
        sender: Sender = HttpSender(config)
        await sender.send("traces", b"warm up")
        took, worst = await loop_stall(sender, body)
        await sender.close()
        rows.append((f"OTLP/HTTP, {compression}", took, worst))
    sender = FileSender(ExporterConfig(file_path=f"{directory}/enriched.jsonl"))
    took, worst = await loop_stall(sender, body)
    await sender.close()
    rows.append(("file (no endpoint)", took, worst))
    return rows


def batch_of(bodies: list[bytes], size: int = 4 * 1024**2) -> bytes:
    """The workload's requests merged into one of about ``size`` bytes."""
    request = ExportTraceServiceRequest()
    for body in bodies:
        request.MergeFromString(body)
        if request.ByteSize() >= size:
            break
    return request.SerializeToString()


def gzip_per_turn(bodies: list[bytes]) -> list[tuple[str, float, float]]:
    """(compressor, ms of CPU per turn, compressed / raw) over the agent workload's requests."""
    raw = sum(map(len, bodies))
    compressors: dict[str, Callable[[bytes], bytes]] = {
        "zlib, level 6 (grpc's)": partial(zlib.compress, level=6),
        "zlib, level 1": partial(zlib.compress, level=1),
        "ISA-L, level 1 (the sidecar's)": gzip_fast,
    }
    rows = []
    for name, compress in compressors.items():
        started = time.process_time()
        packed = sum(len(compress(body)) for body in bodies)
        rows.append((name, (time.process_time() - started) / len(bodies) * 1000, packed / raw))
    return rows


def main() -> None:
    bodies = [turn.body for turn in build_workload(30, 15, 16).turns[:300]]
    body = batch_of(bodies)
    port = free_port()
    server = multiprocessing.Process(target=serve, args=(port,), daemon=True)
    server.start()
    time.sleep(0.5)
    print(f"{CALLS} export requests of {len(body) / 2**20:.1f} MiB each, one after another")
    print()
    print("| sender | time for all (ms) | longest event-loop delay meanwhile (ms) |")
    print("|---|---|---|")
    with tempfile.TemporaryDirectory() as directory:
        for label, took, worst in asyncio.run(stalls(port, body, directory)):
            print(f"| {label} | {took * 1000:,.0f} | {worst * 1000:.1f} |")
    server.terminate()
    print()
    print(f"| gzip | ms of CPU per agent-workload turn ({len(bodies)} turns) | compressed size |")
    print("|---|---|---|")
    for name, ms, ratio in gzip_per_turn(bodies):
        print(f"| {name} | {ms:.2f} | {ratio:.1%} |")


if __name__ == "__main__":
    main()
