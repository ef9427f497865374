"""The OTLP/gRPC sender against a real gRPC server: one connection per exporter consumer, and a send
never queued behind another on a busy connection while one is idle."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable
from concurrent import futures

import grpc

from otelsignals.config import ExporterConfig
from otelsignals.pipeline.senders import GrpcSender
from tests.support.clients import encode_spans, make_spans

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
BODY = encode_spans(make_spans(2, 2)).SerializeToString()


def recording_server(peers: list[str], answer: Callable[[int], None]) -> tuple[grpc.Server, int]:
    """A trace service that notes each call's peer (the client's address and port: one per
    connection) and calls ``answer(call number)`` before answering."""
    lock = threading.Lock()

    def export(body: bytes, context: grpc.ServicerContext) -> bytes:
        with lock:
            number = len(peers)
            peers.append(context.peer())
        answer(number)
        return b""

    server = grpc.server(futures.ThreadPoolExecutor(16))
    handler = grpc.unary_unary_rpc_method_handler(export, request_deserializer=None, response_serializer=None)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


async def wait_for(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not condition():
            await asyncio.sleep(0.01)


async def test_each_consumer_sends_over_a_connection_of_its_own() -> None:
    """Over one connection, gzipped batches went out one after another (bench/grpc_connections.py)."""
    peers: list[str] = []
    release = threading.Event()
    server, port = recording_server(peers, lambda number: release.wait(10))
    config = ExporterConfig(endpoint=f"127.0.0.1:{port}", compression="gzip")
    consumers = config.queue.num_consumers
    assert consumers > 1
    sender = GrpcSender(config)
    try:
        # Twice as many sends as consumers at once: the first ones take a connection each, the
        # others (more than the exporter ever has in flight) share them in turn.
        sends = [asyncio.ensure_future(sender.send("traces", BODY)) for _ in range(2 * consumers)]
        await wait_for(lambda: len(peers) >= consumers)
        release.set()
        results = await asyncio.wait_for(asyncio.gather(*sends), 10)
    finally:
        release.set()
        await sender.close()
        server.stop(None)
    assert all(result.ok for result in results)
    assert sorted(Counter(peers).values()) == [2] * consumers


async def test_a_send_never_waits_behind_a_busy_connection_while_another_is_idle() -> None:
    """One call hangs at the downstream; the sends after it, one at a time, take the idle
    connections, never the busy one (handing connections out in turn would)."""
    peers: list[str] = []
    release = threading.Event()
    server, port = recording_server(peers, lambda number: release.wait(10) if number == 0 else None)
    config = ExporterConfig(endpoint=f"127.0.0.1:{port}", compression="gzip")
    sender = GrpcSender(config)
    try:
        hanging = asyncio.ensure_future(sender.send("traces", BODY))
        await wait_for(lambda: len(peers) == 1)
        later = [await asyncio.wait_for(sender.send("traces", BODY), 10) for _ in range(12)]
        release.set()
        first = await asyncio.wait_for(hanging, 10)
    finally:
        release.set()
        await sender.close()
        server.stop(None)
    assert first.ok and all(result.ok for result in later)
    busy = peers[0]
    assert busy not in peers[1:]
    assert len(set(peers[1:])) == config.queue.num_consumers - 1  # the idle ones, each in turn
