"""The OTLP/gRPC sender against a real gRPC server: one connection per exporter consumer."""

from __future__ import annotations

import asyncio
import threading
from concurrent import futures

import grpc

from otelsignals.config import ExporterConfig
from otelsignals.pipeline.senders import GrpcSender
from tests.support.clients import encode_spans, make_spans

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


def recording_server(peers: list[str], release: threading.Event) -> tuple[grpc.Server, int]:
    """A trace service that notes each call's peer (its client address and port) and answers once
    ``release`` is set, so that calls sent together are in flight together."""

    def export(body: bytes, context: grpc.ServicerContext) -> bytes:
        peers.append(context.peer())
        release.wait(10)
        return b""

    server = grpc.server(futures.ThreadPoolExecutor(8))
    handler = grpc.unary_unary_rpc_method_handler(export, request_deserializer=None, response_serializer=None)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


async def test_each_consumer_sends_over_a_connection_of_its_own() -> None:
    """Over one connection, gzipped batches went out one after another (bench/grpc_connections.py):
    the sender's consumers each use their own, in turn."""
    peers: list[str] = []
    release = threading.Event()
    server, port = recording_server(peers, release)
    config = ExporterConfig(endpoint=f"127.0.0.1:{port}", compression="gzip")
    consumers = config.queue.num_consumers
    assert consumers > 1
    sender = GrpcSender(config)
    body = encode_spans(make_spans(2, 2)).SerializeToString()
    try:
        sends = [asyncio.ensure_future(sender.send("traces", body)) for _ in range(2 * consumers)]
        async with asyncio.timeout(10):
            while len(peers) < consumers:  # as many in flight as there are consumers
                await asyncio.sleep(0.01)
        release.set()
        results = await asyncio.wait_for(asyncio.gather(*sends), 10)
    finally:
        release.set()
        await sender.close()
        server.stop(None)
    assert all(result.ok for result in results)
    assert len(peers) == 2 * consumers
    assert len(set(peers)) == consumers  # one client port per connection, each used twice
