"""How long a gzip-compressed OTLP/gRPC export stalls the process's other Python threads: grpc.aio
against grpc's blocking API called from a thread (what the exporter used until it sent through
connect-python, gzipping on its own threads), same run.

    python bench/grpc_compression_stall.py

A gRPC server in another process takes 5 requests of about 4 MB (an exporter batch of agent text:
``exporter.batch.max_bytes``) sent with gzip; meanwhile a Python thread counts how long it ever waits
between two steps of a busy loop (the analysis thread's position). Plain zlib in an executor thread
and an uncompressed grpc.aio call are given for scale.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import sys
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.agent_workload import TextPool
from tests.support.sidecar import free_port

CALLS = 5
METHOD = "/bench.Sink/Take"


def serve(port: int) -> None:
    async def main() -> None:
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 * 1024**2)])

        async def take(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            return b""

        handler = grpc.unary_unary_rpc_method_handler(
            take, request_deserializer=None, response_serializer=None
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("bench.Sink", {"Take": handler}),)
        )
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    asyncio.run(main())


def worst_stall(send: Callable[[], None]) -> tuple[float, float]:
    """(seconds ``send`` took, the longest wait of a busy Python thread meanwhile)."""
    gaps: list[float] = []
    done = threading.Event()

    def busy() -> None:
        last = time.perf_counter()
        while not done.is_set():
            sum(range(200))
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    thread = threading.Thread(target=busy)
    thread.start()
    started = time.perf_counter()
    send()
    took = time.perf_counter() - started
    done.set()
    thread.join()
    return took, max(gaps)


def main() -> None:
    pool = TextPool.load()
    texts = pool.user + pool.assistant
    body = " ".join(texts[i % len(texts)] for i in range(40_000)).encode()[: 4 * 1024**2]
    port = free_port()
    server = multiprocessing.Process(target=serve, args=(port,), daemon=True)
    server.start()
    target = f"127.0.0.1:{port}"
    options = [("grpc.max_send_message_length", -1)]

    def aio(compression: grpc.Compression) -> Callable[[], None]:
        async def calls() -> None:
            channel = grpc.aio.insecure_channel(target, options=options)
            call = channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
            for _ in range(CALLS):
                await call(body, timeout=30, compression=compression)
            await channel.close()

        return lambda: asyncio.run(calls())

    def blocking() -> None:
        with grpc.insecure_channel(target, options=options) as channel:
            call = channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
            sender = threading.Thread(
                target=lambda: [
                    call(body, timeout=30, compression=grpc.Compression.Gzip) for _ in range(CALLS)
                ]
            )
            sender.start()
            sender.join()

    def futures() -> None:
        async def calls() -> None:
            with grpc.insecure_channel(target, options=options) as channel:
                call = channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
                loop = asyncio.get_running_loop()
                for _ in range(CALLS):
                    rpc = call.future(body, timeout=30, compression=grpc.Compression.Gzip)
                    done = loop.create_future()
                    rpc.add_done_callback(lambda _, d=done: loop.call_soon_threadsafe(d.set_result, None))
                    await done
                    rpc.result()

        asyncio.run(calls())

    def zlib_in_thread() -> None:
        async def calls() -> None:
            for _ in range(CALLS):
                await asyncio.get_running_loop().run_in_executor(None, zlib.compress, body, 6)

        asyncio.run(calls())

    with grpc.insecure_channel(target) as channel:  # wait until the server answers
        grpc.channel_ready_future(channel).result(timeout=30)
    switch_ms = sys.getswitchinterval() * 1000
    print(f"{CALLS} requests of {len(body) / 2**20:.1f} MiB; sys.getswitchinterval() = {switch_ms:g} ms")
    print()
    print("| how | time for all (ms) | worst stall of another Python thread (ms) |")
    print("|---|---|---|")
    for label, send in (
        ("grpc.aio, gzip", aio(grpc.Compression.Gzip)),
        ("grpc blocking API in a thread, gzip (the exporter until 2026-11-30)", blocking),
        ("grpc future API awaited on the event loop, gzip", futures),
        ("grpc.aio, no compression", aio(grpc.Compression.NoCompression)),
        ("zlib.compress in an executor thread (no sending)", zlib_in_thread),
    ):
        took, stall = worst_stall(send)
        print(f"| {label} | {took * 1000:,.0f} | {stall * 1000:.1f} |")
    server.terminate()


if __name__ == "__main__":
    main()
