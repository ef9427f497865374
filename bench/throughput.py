"""End-to-end throughput of the sidecar over loopback, against a same-run protobuf baseline.

    python bench/throughput.py [--batches 400] [--concurrency 4] [--transport grpc|http] [--sampler]
                               [--set SECTION.KEY=VALUE]

Drives a running `otelsignals run` (started here as a subprocess) with pre-serialized OTLP batches
of 512 spans, 10 % of them GenAI chat spans carrying 2 KB of messages, and forwards to a minimal
OTLP/gRPC sink in another process. Prints:
- end-to-end spans/s (first request sent → last span accepted by the sink, wall clock);
- spans per CPU-second of the sidecar process (its utime + stime): the single-core figure;
- the baseline: ExportTraceServiceRequest parse + serialize of the same batches in this process;
- the sidecar's peak RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

import grpc
import orjson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.agent_workload import config_overrides, merged
from tests.support.sidecar import SidecarProcess

SPANS_PER_BATCH = 512
SPANS_PER_TRACE = 8
GENAI_EVERY = 10  # one span in ten is a GenAI chat span (--genai-every; 0 = none)
TRACES_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def make_batch(number: int, genai_every: int = GENAI_EVERY) -> bytes:
    """One request: 64 traces of 8 spans, children before the root as SDKs send them."""
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    for key, value in (("service.name", "checkout"), ("service.version", "1.4.2"), ("host.name", "node-7")):
        attribute = resource_spans.resource.attributes.add()
        attribute.key, attribute.value.string_value = key, value
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = "opentelemetry.instrumentation.bench"
    # Two messages, about 2 KB of JSON (whole: a cut array would be read as one message's text).
    messages = orjson.dumps(
        [
            {"role": "user", "parts": [{"type": "text", "content": "Where is my order? " * 50}]},
            {"role": "assistant", "parts": [{"type": "text", "content": "It left the depot today. " * 37}]},
        ]
    ).decode()
    span_number = 0
    for t in range(SPANS_PER_BATCH // SPANS_PER_TRACE):
        trace_id = (number * 1_000_003 + t + 1).to_bytes(16, "big")
        root_id = (span_number + 1 + number * 10_000).to_bytes(8, "big")
        for c in range(SPANS_PER_TRACE):
            span_number += 1
            is_root = c == SPANS_PER_TRACE - 1
            span = scope_spans.spans.add()
            span.trace_id = trace_id
            span.span_id = (
                root_id if is_root else (span_number + 1 + number * 10_000 + 5000).to_bytes(8, "big")
            )
            if not is_root:
                span.parent_span_id = root_id
            span.name = "POST /checkout" if is_root else f"SELECT orders {c}"
            span.kind = 2 if is_root else 3
            span.start_time_unix_nano = 1_700_000_000_000_000_000 + span_number * 1000
            span.end_time_unix_nano = span.start_time_unix_nano + 5_000_000
            for key, value in (
                ("db.system.name", "postgresql"),
                ("server.address", "db.internal"),
                ("db.query.text", f"SELECT * FROM orders WHERE id = {span_number}"),
            ):
                attribute = span.attributes.add()
                attribute.key, attribute.value.string_value = key, value
            if genai_every and span_number % genai_every == 0:
                for key, value in (
                    ("gen_ai.operation.name", "chat"),
                    ("gen_ai.request.model", "gpt-4o-mini"),
                    ("gen_ai.input.messages", messages),
                ):
                    attribute = span.attributes.add()
                    attribute.key, attribute.value.string_value = key, value
    return request.SerializeToString()


def baseline(batches: list[bytes]) -> float:
    """Spans/s of bare parse + serialize of the same batches, in this process."""
    started = time.perf_counter()
    for body in batches:
        ExportTraceServiceRequest.FromString(body).SerializeToString()
    return len(batches) * SPANS_PER_BATCH / (time.perf_counter() - started)


def run_sink(port_queue: multiprocessing.Queue) -> None:
    """A downstream that takes every request and counts nothing: its cost stays off the figures."""
    from concurrent import futures

    server = grpc.server(futures.ThreadPoolExecutor(4), options=[("grpc.max_receive_message_length", -1)])
    handler = grpc.unary_unary_rpc_method_handler(
        lambda body, context: b"", request_deserializer=None, response_serializer=None
    )
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                "opentelemetry.proto.collector.trace.v1.TraceService", {"Export": handler}
            ),
        )
    )
    port_queue.put(server.add_insecure_port("127.0.0.1:0"))
    server.start()
    server.wait_for_termination()


async def drive_grpc(endpoint: str, batches: list[bytes], concurrency: int) -> None:
    async with grpc.aio.insecure_channel(endpoint, options=[("grpc.max_send_message_length", -1)]) as channel:
        call = channel.unary_unary(TRACES_METHOD, request_serializer=None, response_deserializer=None)
        queue = list(reversed(batches))

        async def worker() -> None:
            while queue:
                body = queue.pop()
                while True:
                    try:
                        await call(body, timeout=30)
                        break
                    except grpc.aio.AioRpcError as err:
                        if err.code() != grpc.StatusCode.UNAVAILABLE:
                            raise
                        await asyncio.sleep(0.05)  # the sidecar is full: back off, as an SDK would

        await asyncio.gather(*(worker() for _ in range(concurrency)))


async def drive_http(url: str, batches: list[bytes], concurrency: int) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        queue = list(reversed(batches))

        async def worker() -> None:
            while queue:
                body = queue.pop()
                while True:
                    async with session.post(
                        url, data=body, headers={"Content-Type": "application/x-protobuf"}
                    ) as response:
                        await response.read()
                        if response.status == 200:
                            break
                        if response.status != 503:
                            raise RuntimeError(f"HTTP {response.status}")
                    await asyncio.sleep(0.05)

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=400, help="distinct 512-span batches to send")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight from the client")
    parser.add_argument("--transport", choices=["grpc", "http"], default="grpc")
    parser.add_argument(
        "--genai-every",
        type=int,
        default=GENAI_EVERY,
        help="one span in N is a GenAI chat span with 2 KB of messages (0: none)",
    )
    parser.add_argument(
        "--compression",
        choices=["none", "gzip"],
        default="none",
        help="sidecar → sink compression (loopback: none)",
    )
    parser.add_argument(
        "--sampler", action="store_true", help="with the triage sampler on (its default rules)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="change the sidecar's configuration (repeatable; VALUE read as YAML)",
    )
    args = parser.parse_args()

    print(f"building {args.batches} batches of {SPANS_PER_BATCH} spans...", file=sys.stderr)
    batches = [make_batch(i, args.genai_every) for i in range(args.batches)]
    total_spans = len(batches) * SPANS_PER_BATCH
    mean_kib = sum(map(len, batches)) / len(batches) / 1024
    base = max(baseline(batches) for _ in range(3))

    ports: multiprocessing.Queue = multiprocessing.Queue()
    sink = multiprocessing.Process(target=run_sink, args=(ports,), daemon=True)
    sink.start()
    sink_port = ports.get(timeout=30)
    workdir = Path(tempfile.mkdtemp(prefix="otelsignals-bench-"))
    sidecar = SidecarProcess(
        workdir,
        {
            "endpoint": f"127.0.0.1:{sink_port}",
            "compression": args.compression,
            "batch": {"timeout": "200ms"},
        },
        assembler={"decision_wait": "2s", "tick_interval": "100ms"},
        log={"level": "warning"},
        **({"sampler": {"enabled": True}} if args.sampler else {}),
    )
    sidecar.config = merged(sidecar.config, config_overrides(args.set))
    with sidecar:
        assert sidecar.process is not None
        pid = sidecar.process.pid
        cpu_before = cpu_seconds(pid)
        started = time.perf_counter()
        if args.transport == "grpc":
            asyncio.run(drive_grpc(sidecar.grpc_endpoint, batches, args.concurrency))
        else:
            asyncio.run(drive_http(f"{sidecar.http_url}/v1/traces", batches, args.concurrency))
        accepted_at = time.perf_counter()
        sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", total_spans, timeout=300)
        finished = time.perf_counter()
        cpu_used = cpu_seconds(pid) - cpu_before
        rss = peak_rss_mib(pid)
        genai = sidecar.metric("otelsignals_analyzer_genai_spans_total")
        dropped = sidecar.metric("otelsignals_dropped_spans_total")
        refused = sidecar.metric("otelsignals_receiver_requests_total", outcome="overloaded")
    sink.terminate()

    wall = finished - started
    end_to_end = total_spans / wall
    per_cpu_second = total_spans / cpu_used
    print(
        f"otelsignals throughput ({args.transport} in, gRPC out, compression {args.compression}, "
        f"{os.cpu_count()} cores)"
    )
    print(
        f"  spans sent                          {total_spans:>12,}  ({len(batches)} batches, "
        f"{mean_kib:.0f} KiB each, {genai:,.0f} GenAI)"
    )
    print(f"  client done after                   {accepted_at - started:>12.2f} s")
    print(f"  last span delivered after           {wall:>12.2f} s")
    print(f"  end-to-end                          {end_to_end:>12,.0f} spans/s")
    print(
        f"  sidecar CPU                         {cpu_used:>12.2f} s  → {per_cpu_second:,.0f} spans per "
        f"CPU-second"
    )
    print(f"  baseline parse+serialize            {base:>12,.0f} spans/s (same batches, this process)")
    print(f"  ratio end-to-end / baseline         {end_to_end / base:>12.2f}")
    print(f"  ratio per-CPU-second / baseline     {per_cpu_second / base:>12.2f}")
    print(f"  sidecar peak RSS                    {rss:>12.0f} MiB")
    print(f"  overload answers (client retried)   {refused:>12,.0f}")
    print(f"  dropped                             {dropped:>12,.0f}")


if __name__ == "__main__":
    main()
