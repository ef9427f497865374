"""How fast the sidecar answers while its analysis has a backlog: health checks, /metrics, OTLP.

    python bench/backlog_latency.py [--batches 400] [--workload mix|agent] [--rounds 2] [--intervals 5ms,1ms]

Requests are sent unpaced, four in flight, so the analysis thread falls behind and stays busy until
the last of them is analysed; the receivers answer UNAVAILABLE while its queue is full and the
client retries, as an SDK would. The requests: ``mix``, the default mix of bench/throughput.py
(512-span requests of plain HTTP/DB traces, one span in ten a GenAI chat span; the event loop
forwards the plain traces itself), or ``agent``, ``--batches`` turns of the agent workload
(bench/agent_workload.py). Meanwhile a prober asks for /healthz, /readyz and /metrics and exports
one small plain trace over OTLP/HTTP, one after another, every 100 ms, and times each answer (a 503
from the receiver is an answer too).

One sidecar per `analyzer.backlog_switch_interval` in ``--intervals``, the intervals alternating for
``--rounds`` rounds on the same requests. Printed for each: the answers' p50 / p99 / max, the
sidecar's CPU per request (its utime + stime from the first request to the last span delivered),
and the wall time to deliver everything. Kubernetes probes time out after 1 s unless told otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.agent_workload import build_workload, percentile
from bench.throughput import SPANS_PER_BATCH, cpu_seconds, drive_grpc, make_batch, run_sink
from tests.support.sidecar import SidecarProcess

PROBE_EVERY = 0.1
DELIVERY_TIMEOUT = 600.0  # after the last request was taken
PROBES = ("/healthz", "/readyz", "/metrics", "OTLP/HTTP export")


def plain_trace(number: int) -> bytes:
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id = (number + 1).to_bytes(16, "big")
    span.span_id = (number + 1).to_bytes(8, "big")
    span.name = "GET /probe"
    span.start_time_unix_nano = 1_700_000_000_000_000_000
    span.end_time_unix_nano = span.start_time_unix_nano + 1_000_000
    return request.SerializeToString()


def answer(request: urllib.request.Request) -> tuple[float, int, bytes]:
    """How long the answer took, its status and its body."""
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as refused:  # 503: the receiver is full, an answer all the same
        status, body = refused.code, refused.read()
    return time.perf_counter() - started, status, body


class Prober(threading.Thread):
    """Times the sidecar's answers every PROBE_EVERY seconds until stopped, and keeps how many of
    the workload's spans the sidecar has sent on (from /metrics: all it sent, less the probe
    exports it had taken before; a lower bound)."""

    def __init__(self, sidecar: SidecarProcess) -> None:
        super().__init__(daemon=True)
        self.sidecar = sidecar
        self.times: dict[str, list[float]] = defaultdict(list)
        self.workload_spans_sent = 0.0
        self.accepted_exports = 0  # one span each
        self.failure: Exception | None = None
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            self._probe_until_stopped()
        except (urllib.error.URLError, ConnectionError, TimeoutError) as failure:
            self.failure = failure

    def _probe_until_stopped(self) -> None:
        admin, number = self.sidecar.admin_url, 0
        while not self.stopped.is_set():
            started = time.monotonic()
            for path in PROBES[:3]:
                accepted_before = self.accepted_exports
                took, _, body = answer(urllib.request.Request(admin + path))
                self.times[path].append(took)
                if path == "/metrics":
                    self.workload_spans_sent = sent_spans(body.decode()) - accepted_before
            number += 1
            export = urllib.request.Request(
                f"{self.sidecar.http_url}/v1/traces",
                data=plain_trace(number),
                headers={"Content-Type": "application/x-protobuf"},
            )
            took, status, _ = answer(export)
            self.times[PROBES[3]].append(took)
            self.accepted_exports += status == 200
            self.stopped.wait(max(0.0, PROBE_EVERY - (time.monotonic() - started)))


def sent_spans(metrics_text: str) -> float:
    for family in text_string_to_metric_families(metrics_text):
        if family.name == "otelsignals_exporter_sent_spans":
            return sum(sample.value for sample in family.samples if sample.name.endswith("_total"))
    return 0.0


@dataclass
class Round:
    interval: str
    number: int
    times: dict[str, list[float]]  # probe -> its answer times (s)
    wall: float  # first request sent -> last span delivered (s)
    cpu_per_request: float  # of the sidecar (s)

    def row(self) -> str:
        cells = [
            " / ".join(f"{percentile(self.times[probe], q) * 1000:,.0f}" for q in (50, 99, 100))
            + f" (n={len(self.times[probe])})"
            for probe in PROBES
        ]
        return " | ".join(
            [
                "| " + self.interval,
                str(self.number),
                *cells,
                f"{self.cpu_per_request * 1000:.2f}",
                f"{self.wall:.1f} |",
            ]
        )


def one_round(bodies: list[bytes], spans: int, interval: str, number: int, sink_port: int) -> Round:
    with tempfile.TemporaryDirectory(prefix="otelsignals-backlog-") as workdir:
        sidecar = SidecarProcess(
            Path(workdir),
            {"endpoint": f"127.0.0.1:{sink_port}", "compression": "none"},
            analyzer={"backlog_switch_interval": interval},
            log={"level": "warning"},
        )
        with sidecar:
            assert sidecar.process is not None
            pid = sidecar.process.pid
            prober = Prober(sidecar)
            cpu_before, started = cpu_seconds(pid), time.perf_counter()
            prober.start()
            asyncio.run(drive_grpc(sidecar.grpc_endpoint, bodies, 4))
            deadline = time.monotonic() + DELIVERY_TIMEOUT
            while prober.workload_spans_sent < spans:
                if not prober.is_alive() or sidecar.process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(
                        f"{interval}: {prober.workload_spans_sent:,.0f} of {spans:,} spans delivered; "
                        f"prober failure: {prober.failure!r}; sidecar exit code: {sidecar.process.poll()}"
                    )
                time.sleep(0.05)
            wall, cpu = time.perf_counter() - started, cpu_seconds(pid) - cpu_before
            prober.stopped.set()
            prober.join()
    return Round(interval, number, prober.times, wall, cpu / len(bodies))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", type=int, default=400, help="requests to send")
    parser.add_argument("--workload", choices=["mix", "agent"], default="mix")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--intervals", default="5ms,1ms", help="analyzer.backlog_switch_interval values (5ms: Python's own)"
    )
    parser.add_argument("--seed", type=int, default=16)
    args = parser.parse_args()

    if args.workload == "mix":
        bodies, spans = [make_batch(number) for number in range(args.batches)], args.batches * SPANS_PER_BATCH
    else:  # about 22 turns a conversation
        turns = build_workload(args.batches // 11 + 2, args.batches // 22 + 1, args.seed).turns[
            : args.batches
        ]
        bodies, spans = [turn.body for turn in turns], sum(turn.spans for turn in turns)
    ports: multiprocessing.Queue[int] = multiprocessing.Queue()
    sink = multiprocessing.Process(target=run_sink, args=(ports,), daemon=True)
    sink.start()
    sink_port = ports.get(timeout=30)
    print(
        f"{len(bodies):,} requests, {spans:,} spans; probes every {PROBE_EVERY * 1000:.0f} ms",
        file=sys.stderr,
    )
    results = []
    for number in range(1, args.rounds + 1):
        for interval in args.intervals.split(","):
            results.append(one_round(bodies, spans, interval, number, sink_port))
            print(f"round {number}, {interval}: delivered in {results[-1].wall:.1f} s", file=sys.stderr)
    sink.terminate()

    columns = [f"{probe} p50 / p99 / max (ms)" for probe in PROBES]
    print(
        " | ".join(
            [
                "| backlog_switch_interval",
                "round",
                *columns,
                "sidecar CPU per request (ms)",
                "delivered in (s) |",
            ]
        )
    )
    print("|---" * (len(PROBES) + 4) + "|")
    for result in results:
        print(result.row())


if __name__ == "__main__":
    main()
