"""Gzipped OTLP/gRPC batches over one connection against one connection per sending thread.

    .venv/bin/python bench/grpc_connections.py [--rates 20,40] [--batches 200] [--rounds 2]

The exporter's consumers (otelsignals/pipeline/senders.py, GrpcSender) called grpc's blocking API on
a pool of 4 threads, with gzip, when this was measured (they now send through connect-python, the
sidecar gzipping, still one connection per consumer as this found best). This sends
bench/agent_workload.py's requests, two turns per batch (~600 KB: what a 50 ms batch held at ~40
turns/s; at the 20 ms default a batch holds about one turn), at a fixed rate (open loop) from such a
pool to a gRPC server in another process that answers at once, while a busy Python thread stands in
for the analysis; it reports each setting's call latency (p50 / p99 / max, from the call's start on
its thread to the answer: the wait for a free thread, which the sidecar's delivery histogram counts,
is left out). Settings alternate, ``--rounds`` times each:

- ``1 connection``: the 4 threads share one channel (grpc's default: channels to one target share
  one connection, too);
- ``4 connections``: four channels, each with its own connection (``grpc.use_local_subchannel_pool``),
  each call on one no other call is using, as GrpcSender does.

Markdown to stdout.
"""

from __future__ import annotations

import argparse
import queue
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from agent_workload import build_workload  # noqa: E402

METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
THREADS = 4
SERVER = r"""
import sys
from concurrent import futures
import grpc

def export(body, context):
    return b""

options = [("grpc.max_receive_message_length", 64 * 1024**2)]
server = grpc.server(futures.ThreadPoolExecutor(4), options=options)
handler = grpc.unary_unary_rpc_method_handler(export, request_deserializer=None, response_serializer=None)
service = grpc.method_handlers_generic_handler(
    "opentelemetry.proto.collector.trace.v1.TraceService", {"Export": handler}
)
server.add_generic_rpc_handlers((service,))
print(server.add_insecure_port("127.0.0.1:0"), flush=True)
server.start()
server.wait_for_termination()
"""


def batches(count: int) -> list[bytes]:
    """``count`` batches of two workload turns each (two encoded requests concatenated are one
    valid request: protobuf merges repeated fields)."""
    bodies = [turn.body for turn in build_workload(max(20, count // 10), 10, 16).turns]
    return [bodies[2 * i % len(bodies)] + bodies[(2 * i + 1) % len(bodies)] for i in range(count)]


def send_all(port: int, connections: int, payloads: list[bytes], rate: float) -> list[float]:
    """Call latencies (s) of ``payloads`` sent at ``rate`` per second from THREADS threads over
    ``connections`` connections (one shared, or one idle one per call)."""
    options = [("grpc.max_send_message_length", -1), ("grpc.use_local_subchannel_pool", 1)]
    channels = [grpc.insecure_channel(f"127.0.0.1:{port}", options=options) for _ in range(connections)]
    calls = [
        channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
        for channel in channels
    ]
    idle: queue.Queue[grpc.UnaryUnaryMultiCallable] = queue.Queue()
    for call in calls:
        idle.put(call)
    latencies: list[float] = []

    def send(payload: bytes) -> None:
        started = time.perf_counter()
        call = calls[0] if connections == 1 else idle.get()  # as many connections as threads, else one
        try:
            call(payload, timeout=60, compression=grpc.Compression.Gzip)
        finally:
            if connections > 1:
                idle.put(call)
        latencies.append(time.perf_counter() - started)

    with ThreadPoolExecutor(THREADS) as pool:
        start = time.perf_counter()
        pending = []
        for index, payload in enumerate(payloads):
            delay = start + index / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            pending.append(pool.submit(send, payload))
        for future in pending:
            future.result()
    for channel in channels:
        channel.close()
    return sorted(latencies)


def busy_python(stop: threading.Event) -> None:
    """Holds the GIL as the analysis thread does, between its switches."""
    total = 0
    while not stop.is_set():
        for number in range(1000):
            total += number


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rates", default="20,40", help="batches per second, comma-separated")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    payloads = batches(args.batches)
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE)
    assert server.stdout is not None
    port = int(server.stdout.readline())
    stop = threading.Event()
    threading.Thread(target=busy_python, args=(stop,), daemon=True).start()
    size = sum(map(len, payloads)) / len(payloads) / 1024
    print(f"{len(payloads)} batches of {size:,.0f} KiB on average, gzip, {THREADS} sending threads.\n")
    print("| batches/s | connections | round | p50 (ms) | p99 (ms) | max (ms) |")
    print("|---|---|---|---|---|---|")
    try:
        for rate in (float(rate) for rate in args.rates.split(",")):
            for round_number in range(1, args.rounds + 1):
                for connections in (1, THREADS):
                    latencies = send_all(port, connections, payloads, rate)
                    p50 = latencies[len(latencies) // 2] * 1000
                    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000
                    print(
                        f"| {rate:g} | {connections} | {round_number} | {p50:.1f} | {p99:.1f} |"
                        f" {latencies[-1] * 1000:.1f} |",
                        flush=True,
                    )
    finally:
        stop.set()
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
