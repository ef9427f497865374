"""How long an OTLP/HTTP export stalls the event loop the receivers run on, with gzip and without.

    python bench/http_export_loop_stall.py

The sidecar's exporter sends on the same asyncio event loop as its OTLP receivers and admin API.
A stdlib HTTP server in another process takes 5 requests of about 4 MB (an exporter batch of agent
text: ``exporter.batch.max_bytes``) through ``HttpSender``, one after another; meanwhile a task on
the loop sleeps 1 ms at a time and records the longest time it waited beyond that: the longest a
request arriving at a receiver would have waited for the loop. Also the gzip figures of the
agent workload's requests (``bench/agent_workload.py``, one turn each) at zlib level 6 (grpc's
fixed level, for OTLP/gRPC) and level 1 (the OTLP/HTTP exporter's).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import sys
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.agent_workload import TextPool, build_workload
from otelsignals.config import ExporterConfig
from otelsignals.pipeline.senders import HttpSender
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


async def loop_stall(sender: HttpSender, body: bytes) -> tuple[float, float]:
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
    started = time.perf_counter()
    for _ in range(CALLS):
        result = await sender.send("traces", body)
        assert result.ok, result
    took = time.perf_counter() - started
    done.set()
    await ticking
    return took, worst


async def stalls(port: int, body: bytes) -> list[tuple[str, float, float]]:
    rows = []
    for compression in ("gzip", "none"):
        config = ExporterConfig(endpoint=f"http://127.0.0.1:{port}", protocol="http/protobuf")
        config.compression = compression  # type: ignore[assignment]
        sender = HttpSender(config)
        await sender.send("traces", b"warm up")
        took, worst = await loop_stall(sender, body)
        await sender.close()
        rows.append((compression, took, worst))
    return rows


def gzip_per_turn(turns: int = 300) -> list[tuple[int, float, float]]:
    """(level, ms of CPU per turn, compressed / raw) over the agent workload's first turns."""
    bodies = [turn.body for turn in build_workload(30, 15, 16).turns[:turns]]
    raw = sum(map(len, bodies))
    rows = []
    for level in (6, 1):
        started = time.process_time()
        packed = sum(len(zlib.compress(body, level)) for body in bodies)
        rows.append((level, (time.process_time() - started) / len(bodies) * 1000, packed / raw))
    return rows


def main() -> None:
    pool = TextPool.load()
    texts = pool.user + pool.assistant
    body = " ".join(texts[i % len(texts)] for i in range(80_000)).encode()[: 4 * 1024**2]
    port = free_port()
    server = multiprocessing.Process(target=serve, args=(port,), daemon=True)
    server.start()
    time.sleep(0.5)
    print(f"{CALLS} OTLP/HTTP requests of {len(body) / 2**20:.1f} MiB, one after another")
    print()
    print("| exporter.compression | time for all (ms) | longest event-loop delay meanwhile (ms) |")
    print("|---|---|---|")
    for compression, took, worst in asyncio.run(stalls(port, body)):
        print(f"| {compression} | {took * 1000:,.0f} | {worst * 1000:.1f} |")
    server.terminate()
    print()
    print("| zlib level | ms of CPU per agent-workload turn | compressed size |")
    print("|---|---|---|")
    for level, ms, ratio in gzip_per_turn():
        print(f"| {level} | {ms:.2f} | {ratio:.1%} |")


if __name__ == "__main__":
    main()
