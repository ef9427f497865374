"""Fault harness: the real sidecar process under downstream outages, refusals, SIGKILLs and bad input.

    .venv/bin/python bench/chaos.py [--quick] [--only NAME ...] [--json PATH] [--list]

Every scenario starts `otelsignals run` (tests/support/sidecar.py) on free loopback ports, forwarding
to an OtlpSink (tests/support/otlp_sink.py, a real OTLP/gRPC + OTLP/HTTP downstream that can be set
down, slowed or scripted to refuse), and drives it with the real OpenTelemetry SDK exporters from
threads. Unless a scenario is about it, the disk queue (exporter.queue.directory) is on. A "good
client" sends one small span every 50 ms over gRPC in every scenario and times each export.

One Markdown table goes to stdout (progress to stderr), a row per scenario:

- sent: spans the clients tried to export (a gzip bomb counts as one);
- acknowledged: spans in requests the sidecar answered with success;
- delivered: distinct acknowledged span ids found at the sink;
- lost: acknowledged - delivered (distinct ids);
- duplicated: deliveries beyond the first per span id (of the spans the clients sent);
- good-client worst latency: the slowest export of the good client(s), SDK retries included;
- peak RSS: the sidecar's VmHWM during the scenario (reset after warm-up), with its idle VmRSS;
- RSS bound: idle + 2 x (largest single request on the wire) + 200 MiB.

Verdict PASS needs lost == 0 (for the permanent-400 scenario: every acknowledged span dropped and
counted instead), peak RSS within the bound, and in the bad-input scenarios (large message, indexed
messages, gzip bomb, idle connections) a good client that never failed and never waited > 1000 ms.

The exporter's retry backoff is shortened (initial 200 ms, cap 2 s; the product default caps at
30 s) so that recoveries show within the scenario; a server's Retry-After is honoured up to the cap.
"""

from __future__ import annotations

import argparse
import contextlib
import email.utils
import json
import logging
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc
import orjson
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.clients import encode_spans
from tests.support.otlp_sink import OtlpSink, Response
from tests.support.sidecar import SidecarProcess

MIB = 1024 * 1024
KIB = 1024
TRACES_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
LATENCY_TARGET_S = 1.0
RSS_HEADROOM = 200 * MIB
GOOD_INTERVAL_S = 0.05
BULK_INTERVAL_S = 0.1
RETRY = {"initial_interval": "200ms", "max_interval": "2s"}

SpanKey = tuple[bytes, bytes]

# -- output -----------------------------------------------------------------------------------------


def log(message: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Row:
    scenario: str
    sent: int
    acknowledged: int
    delivered: int
    lost: int
    duplicated: int
    worst_latency_ms: float | None
    peak_rss_mib: float
    idle_rss_mib: float
    rss_bound_mib: float
    largest_request_bytes: int
    verdict: str
    notes: str = ""
    good_client_errors: int = 0
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"


HEADER = (
    "| scenario | sent | acknowledged | delivered | lost | duplicated | good-client worst latency (ms) "
    "| peak RSS (MiB) [idle] | RSS bound (MiB) | verdict | notes |"
)


def markdown(rows: Sequence[Row]) -> str:
    lines = [HEADER, "|" + "---|" * 11]
    for row in rows:
        worst = "-" if row.worst_latency_ms is None else f"{row.worst_latency_ms:.0f}"
        lines.append(
            f"| {row.scenario} | {row.sent} | {row.acknowledged} | {row.delivered} | {row.lost} "
            f"| {row.duplicated} | {worst} | {row.peak_rss_mib:.0f} [{row.idle_rss_mib:.0f}] "
            f"| {row.rss_bound_mib:.0f} | {row.verdict} | {row.notes} |"
        )
    return "\n".join(lines)


# -- spans ------------------------------------------------------------------------------------------


def key_of(span: ReadableSpan) -> SpanKey:
    context = span.get_span_context()
    assert context is not None
    return context.trace_id.to_bytes(16, "big"), context.span_id.to_bytes(8, "big")


class SpanSource:
    """Fresh SDK spans on demand (unique ids), from a real TracerProvider."""

    def __init__(self, service: str, limits: SpanLimits | None = None) -> None:
        self._memory = InMemorySpanExporter()
        self._provider = TracerProvider(
            resource=Resource.create({"service.name": service, "deployment.environment": "chaos"}),
            span_limits=limits or SpanLimits(),
        )
        self._provider.add_span_processor(SimpleSpanProcessor(self._memory))
        self._tracer = self._provider.get_tracer("bench.chaos", "1.0")
        self._lock = threading.Lock()

    def _take(self) -> list[ReadableSpan]:
        spans = list(self._memory.get_finished_spans())
        self._memory.clear()
        return spans

    def traces(self, count: int, children: int = 0) -> list[ReadableSpan]:
        """``count`` traces of a root SERVER span and ``children`` children, children ended first."""
        with self._lock:
            for t in range(count):
                with self._tracer.start_as_current_span("POST /orders", kind=SpanKind.SERVER) as root:
                    root.set_attribute("http.request.method", "POST")
                    for c in range(children):
                        with self._tracer.start_as_current_span(f"step {c}") as child:
                            child.set_attribute("db.system.name", "postgresql")
                            child.set_attribute("db.query.text", f"SELECT * FROM orders WHERE id = {t}")
            return self._take()

    def genai(self, attributes: dict[str, Any]) -> list[ReadableSpan]:
        """One GenAI chat span carrying ``attributes``, as its own trace."""
        with self._lock:
            with self._tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as span:
                span.set_attribute("gen_ai.operation.name", "chat")
                span.set_attribute("gen_ai.system", "openai")
                span.set_attribute("gen_ai.request.model", "gpt-4o")
                for key, value in attributes.items():
                    span.set_attribute(key, value)
            return self._take()


UNLIMITED = SpanLimits(max_span_attributes=SpanLimits.UNSET, max_attribute_length=SpanLimits.UNSET)


def large_message_span(text_bytes: int) -> list[ReadableSpan]:
    sentence = "I was charged twice for the same order and nobody answers my emails. "
    text = (sentence * (text_bytes // len(sentence) + 1))[:text_bytes]
    messages = [{"role": "user", "parts": [{"type": "text", "content": text}]}]
    return SpanSource("chaos-large", UNLIMITED).genai(
        {"gen_ai.input.messages": orjson.dumps(messages).decode()}
    )


def indexed_messages_span(count: int) -> list[ReadableSpan]:
    attributes: dict[str, Any] = {}
    for i in range(count):
        user = i % 2 == 0
        attributes[f"gen_ai.prompt.{i}.role"] = "user" if user else "assistant"
        attributes[f"gen_ai.prompt.{i}.content"] = (
            f"Where is order {i}? It still has not arrived." if user else f"Order {i} left the depot today."
        )
    return SpanSource("chaos-indexed", UNLIMITED).genai(attributes)


# -- the ledger of what was sent and acknowledged ---------------------------------------------------


class Ledger:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sent = 0
        self.acknowledged = 0
        self.sent_ids: set[SpanKey] = set()
        self.acked_ids: set[SpanKey] = set()
        self.largest_request = 0

    def record(self, keys: Sequence[SpanKey], wire_bytes: int, ok: bool, count: int | None = None) -> None:
        with self._lock:
            n = len(keys) if count is None else count
            self.sent += n
            self.sent_ids.update(keys)
            self.largest_request = max(self.largest_request, wire_bytes)
            if ok:
                self.acknowledged += n
                self.acked_ids.update(keys)


def export_recorded(
    ledger: Ledger, exporter: SpanExporter, spans: Sequence[ReadableSpan]
) -> tuple[bool, float]:
    """Export ``spans`` with a real SDK exporter; record them; return (acknowledged, seconds)."""
    size = encode_spans(spans).ByteSize()
    started = time.monotonic()
    result = exporter.export(spans)
    elapsed = time.monotonic() - started
    ok = result is SpanExportResult.SUCCESS
    ledger.record([key_of(s) for s in spans], size, ok)
    return ok, elapsed


def make_exporter(sidecar: SidecarProcess, transport: str, timeout: float = 10.0) -> SpanExporter:
    if transport == "grpc":
        return GrpcSpanExporter(endpoint=sidecar.grpc_endpoint, insecure=True, timeout=timeout)
    return HttpSpanExporter(endpoint=f"{sidecar.http_url}/v1/traces", timeout=timeout)


class PeriodicClient:
    """A thread exporting ``traces`` x (1 + ``children``) fresh spans every ``interval`` seconds over
    one long-lived SDK exporter, timing each export."""

    def __init__(
        self,
        name: str,
        sidecar: SidecarProcess,
        ledger: Ledger,
        transport: str,
        interval: float,
        traces: int = 1,
        children: int = 0,
        timeout: float = 10.0,
    ) -> None:
        self.name = name
        self.ledger = ledger
        self.interval = interval
        self.traces, self.children = traces, children
        self.source = SpanSource(f"chaos-{name}")
        self.exporter = make_exporter(sidecar, transport, timeout)
        self.latencies: list[float] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"client-{name}", daemon=True)

    def send_one(self) -> bool:
        ok, elapsed = export_recorded(
            self.ledger, self.exporter, self.source.traces(self.traces, self.children)
        )
        self.latencies.append(elapsed)
        if not ok:
            self.errors += 1
        return ok

    def _run(self) -> None:
        while not self._stop.is_set():
            self.send_one()
            self._stop.wait(self.interval)

    def start(self) -> PeriodicClient:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(60)
        self.exporter.shutdown()

    @property
    def worst(self) -> float:
        return max(self.latencies, default=0.0)


# -- the sidecar's memory ---------------------------------------------------------------------------


def proc_status_kib(pid: int, field_name: str) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    return None


class RssMonitor:
    """Peak VmHWM of the sidecar (whatever its current pid: restarts are followed), sampled."""

    def __init__(self, sidecar: SidecarProcess) -> None:
        self.sidecar = sidecar
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-monitor", daemon=True)

    def _pid(self) -> int | None:
        process = self.sidecar.process
        return None if process is None or process.poll() is not None else process.pid

    def start(self) -> None:
        pid = self._pid()
        if pid is not None:
            with contextlib.suppress(OSError):
                Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := current RSS
        self.sample()
        self._thread.start()

    def sample(self) -> None:
        pid = self._pid()
        if pid is None:
            return
        for name in ("VmHWM", "VmRSS"):
            value = proc_status_kib(pid, name)
            if value is not None:
                self.peak_kib = max(self.peak_kib, value)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.sample()

    def stop(self) -> float:
        self.sample()
        self._stop.set()
        self._thread.join(5)
        return self.peak_kib * KIB / MIB


# -- one scenario's world ---------------------------------------------------------------------------


@dataclass
class Settings:
    quick: bool = False
    workdir: Path | None = None  # default: a fresh temporary directory per scenario


@dataclass
class Env:
    name: str
    sink: OtlpSink
    sidecar: SidecarProcess
    ledger: Ledger = field(default_factory=Ledger)
    clients: list[PeriodicClient] = field(default_factory=list)
    good: list[PeriodicClient] = field(default_factory=list)
    idle_rss_mib: float = 0.0
    monitor: RssMonitor | None = None
    started: float = field(default_factory=time.monotonic)
    _seen_seqs: set[int] = field(default_factory=set)
    _deliveries: Counter[SpanKey] = field(default_factory=Counter)

    # ---- clients ------------------------------------------------------------------------------

    def good_client(self, transport: str = "grpc") -> PeriodicClient:
        client = PeriodicClient(f"good-{transport}", self.sidecar, self.ledger, transport, GOOD_INTERVAL_S)
        client.send_one()  # connected before the trouble starts
        self.good.append(client)
        self.clients.append(client)
        return client.start()

    def bulk_client(self, transport: str, timeout: float = 10.0) -> PeriodicClient:
        """20 spans (2 traces of 10) every 100 ms."""
        client = PeriodicClient(
            f"bulk-{transport}", self.sidecar, self.ledger, transport, BULK_INTERVAL_S, 2, 9, timeout
        )
        self.clients.append(client)
        return client.start()

    def stop_clients(self) -> None:
        clients, self.clients = self.clients, []
        for client in clients:
            client._stop.set()  # all at once, then wait for each
        for client in clients:
            client.stop()

    # ---- observations -------------------------------------------------------------------------

    def deliveries(self) -> Counter[SpanKey]:
        """How many times the sink accepted each span id (incrementally, by request seq)."""
        for item in self.sink.received:
            if item.seq in self._seen_seqs or item.signal != "traces":
                continue
            self._seen_seqs.add(item.seq)
            request = item.decode()
            for rs in request.resource_spans:  # type: ignore[attr-defined]
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        self._deliveries[(span.trace_id, span.span_id)] += 1
        return self._deliveries

    def missing(self) -> int:
        delivered = self.deliveries()
        return sum(1 for key in self.ledger.acked_ids if key not in delivered)

    def wait_delivered(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            missing = self.missing()
            if missing == 0:
                return True
            if time.monotonic() >= deadline:
                log(f"{self.name}: {missing} acknowledged spans still missing after {timeout:.0f}s")
                return False
            time.sleep(0.25)

    def metric(self, name: str, **labels: str) -> float:
        try:
            return self.sidecar.metric(name, **labels)
        except OSError:
            return float("nan")

    # ---- the row ------------------------------------------------------------------------------

    def finish(
        self,
        *,
        latency_gate: bool,
        checks: Sequence[tuple[bool, str]] = (),
        notes: Sequence[str] = (),
        lost_gate: bool = True,
    ) -> Row:
        self.stop_clients()
        assert self.monitor is not None
        peak = self.monitor.stop()
        delivered_counts = self.deliveries()
        acked = self.ledger.acked_ids
        delivered = sum(1 for key in acked if key in delivered_counts)
        lost = len(acked) - delivered
        duplicated = sum(
            n - 1 for key, n in delivered_counts.items() if n > 1 and key in self.ledger.sent_ids
        )
        worst = max((c.worst for c in self.good), default=None)
        errors = sum(c.errors for c in self.good)
        bound = self.idle_rss_mib + (2 * self.ledger.largest_request + RSS_HEADROOM) / MIB
        failures = [reason for ok, reason in checks if not ok]
        if lost_gate and lost:
            failures.append(f"{lost} lost")
        if peak > bound:
            failures.append("RSS over bound")
        if latency_gate:
            if worst is None or worst > LATENCY_TARGET_S:
                failures.append("good client > 1 s")
            if errors:
                failures.append(f"good client failed {errors}x")
        all_notes = list(notes)
        if errors and not latency_gate:
            all_notes.append(f"good-client failures {errors}")
        return Row(
            scenario=self.name,
            sent=self.ledger.sent,
            acknowledged=self.ledger.acknowledged,
            delivered=delivered,
            lost=lost,
            duplicated=duplicated,
            worst_latency_ms=None if worst is None else worst * 1000,
            peak_rss_mib=peak,
            idle_rss_mib=self.idle_rss_mib,
            rss_bound_mib=bound,
            largest_request_bytes=self.ledger.largest_request,
            verdict="PASS" if not failures else "FAIL: " + "; ".join(failures),
            notes="; ".join(all_notes),
            good_client_errors=errors,
            seconds=time.monotonic() - self.started,
        )


@contextlib.contextmanager
def environment(
    name: str,
    settings: Settings,
    *,
    protocol: str = "grpc",
    disk_queue: bool = True,
    exporter: dict[str, Any] | None = None,
    **sections: Any,
) -> Iterator[Env]:
    log(f"{name}: starting")
    with contextlib.ExitStack() as stack:
        if settings.workdir is not None:
            workdir = settings.workdir / name
            workdir.mkdir(parents=True, exist_ok=True)
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"chaos-{name}-")))
        sink = stack.enter_context(OtlpSink())
        config: dict[str, Any] = {
            "endpoint": sink.grpc_endpoint if protocol == "grpc" else sink.http_endpoint,
            "protocol": protocol,
            "batch": {"timeout": "200ms"},
            "retry": dict(RETRY),
            **(exporter or {}),
        }
        if disk_queue:
            config.setdefault("queue", {})["directory"] = str(workdir / "queue")
        sidecar = SidecarProcess(workdir, config, **sections)
        stack.callback(sidecar.__exit__)
        sidecar.start()
        env = Env(name, sink, sidecar)
        stack.callback(env.stop_clients)
        # Warm-up: one GenAI conversation through the whole pipeline, so that whatever loads lazily
        # has loaded before the idle RSS is taken. Not counted in the row.
        warm = SpanSource("chaos-warmup").genai(
            {
                "gen_ai.input.messages": orjson.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": "Where is my order?"}]}]
                ).decode()
            }
        )
        warm_exporter = make_exporter(sidecar, "grpc")
        try:
            warm_exporter.export(warm)
        finally:
            warm_exporter.shutdown()
        deadline = time.monotonic() + 30
        while key_of(warm[0]) not in env.deliveries() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        assert sidecar.process is not None
        env.idle_rss_mib = (proc_status_kib(sidecar.process.pid, "VmRSS") or 0) * KIB / MIB
        env.monitor = RssMonitor(sidecar)
        env.monitor.start()
        env.started = time.monotonic()
        yield env


# -- scenarios --------------------------------------------------------------------------------------


def scenario_outage(settings: Settings) -> Row:
    """1. The downstream is down (sockets closed) for 30 s (quick: 3 s), then back."""
    outage = 3.0 if settings.quick else 30.0
    with environment("outage", settings) as env:
        env.good_client("grpc")
        env.bulk_client("grpc")
        env.bulk_client("http")
        time.sleep(0.5)
        env.sink.set_down(True)
        log(f"outage: downstream down for {outage:.0f}s")
        time.sleep(outage)
        env.sink.set_down(False)
        time.sleep(1.0)
        env.stop_clients()
        env.wait_delivered(30 if settings.quick else 60)
        retries = env.metric("otelsignals_exporter_retries_total")
        row = env.finish(latency_gate=False, notes=[f"down {outage:.0f}s", f"retries {retries:.0f}"])
    row.scenario = f"downstream down {outage:.0f}s, then back"
    return row


def past_http_date() -> str:
    return email.utils.formatdate(time.time() - 3600, usegmt=True)


# name -> (label, exporter protocol, the refusal)
RETRY_VARIANTS: dict[str, tuple[str, str, Callable[[], Response]]] = {
    "503-ra-0": ("503, Retry-After: 0", "http/protobuf", lambda: Response.unavailable(retry_after=0)),
    "503-ra-0.2": ("503, Retry-After: 0.2", "http/protobuf", lambda: Response.unavailable(retry_after=0.2)),
    "503-ra-400": ("503, Retry-After: 400", "http/protobuf", lambda: Response.unavailable(retry_after=400)),
    "503-ra-past-date": (
        "503, Retry-After: <HTTP-date 1 h ago>",
        "http/protobuf",
        lambda: Response(grpc.StatusCode.UNAVAILABLE, 503, retry_after_header=past_http_date()),
    ),
    "429-ra-2": ("429, Retry-After: 2", "http/protobuf", lambda: Response.throttled(retry_after=2)),
    "grpc-exhausted-ri-3600": (
        "gRPC RESOURCE_EXHAUSTED, RetryInfo 3600 s",
        "grpc",
        lambda: Response.throttled(retry_after=3600),
    ),
}


def scenario_retry_after(variant: str, settings: Settings) -> Row:
    """2. The downstream refuses with a retry hint for a few seconds, then accepts."""
    label, protocol, refusal = RETRY_VARIANTS[variant]
    fault = 2.0 if settings.quick else 8.0
    with environment(variant, settings, protocol=protocol) as env:
        env.good_client("grpc")
        env.bulk_client("grpc")
        time.sleep(0.3)
        env.sink.set_fallback(refusal())
        time.sleep(fault)
        env.sink.set_fallback(None)
        time.sleep(0.5)
        env.stop_clients()
        env.wait_delivered(20 if settings.quick else 40)
        retries = env.metric("otelsignals_exporter_retries_total")
        attempts = env.sink.attempts
        row = env.finish(
            latency_gate=False,
            notes=[
                f"refused for {fault:.0f}s",
                f"retries {retries:.0f} ({retries / fault:.1f}/s)",
                f"downstream attempts {attempts}",
            ],
        )
    row.scenario = f"{label}, recovers after {fault:.0f}s"
    return row


def scenario_permanent_400(settings: Settings) -> Row:
    """3. The downstream answers 400 to everything: dropped by design, and counted."""
    duration = 2.0 if settings.quick else 5.0
    with environment("http-400", settings, protocol="http/protobuf") as env:
        dropped_before = env.metric("otelsignals_dropped_spans_total", stage="exporter")
        env.sink.set_fallback(Response.invalid("chaos: schema says no"))
        env.good_client("grpc")
        env.bulk_client("grpc")
        time.sleep(duration)
        env.stop_clients()
        deadline = time.monotonic() + 20
        dropped = 0.0
        while time.monotonic() < deadline:
            dropped = env.metric("otelsignals_dropped_spans_total", stage="exporter") - dropped_before
            if dropped >= env.ledger.acknowledged:
                break
            time.sleep(0.2)
        time.sleep(0.5)
        dropped = env.metric("otelsignals_dropped_spans_total", stage="exporter") - dropped_before
        by_reason = env.metric("otelsignals_dropped_spans_total", stage="exporter", reason="http_400")
        retries = env.metric("otelsignals_exporter_retries_total")
        acked = env.ledger.acknowledged
        row = env.finish(
            latency_gate=False,
            lost_gate=False,
            checks=[
                (dropped == acked, f"dropped counter {dropped:.0f} != acknowledged {acked}"),
                (retries == 0, f"{retries:.0f} retries of a permanent refusal"),
            ],
            notes=[f"dropped (counted, reason http_400) {by_reason:.0f}", f"retries {retries:.0f}"],
        )
    row.scenario = "downstream answers 400 permanently"
    return row


def scenario_slow(settings: Settings) -> Row:
    """4. Every downstream answer is delayed by 2 s."""
    duration = 4.0 if settings.quick else 10.0
    with environment("slow", settings) as env:
        env.sink.set_delay(2.0)
        env.good_client("grpc")
        env.bulk_client("grpc")
        env.bulk_client("http")
        time.sleep(duration)
        env.stop_clients()
        env.wait_delivered(30 if settings.quick else 60)
        sent_requests = env.metric("otelsignals_exporter_sent_requests_total")
        row = env.finish(
            latency_gate=False,
            notes=[f"answers delayed 2s for {duration:.0f}s", f"requests {sent_requests:.0f}"],
        )
    row.scenario = "downstream slow (2 s per answer)"
    return row


def scenario_sigkill(settings: Settings) -> Row:
    """5. kill -9 the sidecar 5 times while clients keep sending; restart it on the same disk queue."""
    kills = 5
    between = 1.5 if settings.quick else 3.0
    with environment("sigkill", settings) as env:
        # Answers take 300 ms, so that every kill lands with exports in flight and a backlog on disk.
        env.sink.set_delay(0.3)
        env.good_client("grpc")
        env.bulk_client("grpc", timeout=20)
        env.bulk_client("http", timeout=20)
        assert env.monitor is not None
        restart_times = []
        for n in range(kills):
            time.sleep(between)
            env.monitor.sample()
            env.sidecar.kill()
            log(f"sigkill: killed ({n + 1}/{kills}), restarting")
            started = time.monotonic()
            env.sidecar.start()
            restart_times.append(time.monotonic() - started)
        time.sleep(between)
        env.stop_clients()
        env.wait_delivered(30 if settings.quick else 60)
        replayed = env.metric("otelsignals_exporter_sent_spans_total")
        row = env.finish(
            latency_gate=False,
            notes=[
                f"{kills} x SIGKILL every {between:.1f}s, downstream answers in 0.3s",
                f"restart {max(restart_times):.1f}s max",
                f"sent after last restart {replayed:.0f}",
            ],
        )
    row.scenario = f"SIGKILL x{kills} + restart on the same disk queue"
    return row


def _one_bad_request(
    env: Env, spans: list[ReadableSpan], transport: str, settle: float, drain: float
) -> tuple[bool, float]:
    """Send ``spans`` once (real SDK exporter) while the good client runs; keep the good client
    running until they have arrived downstream (or ``drain`` passed) and ``settle`` more, then stop
    it and wait for its last spans."""
    exporter = make_exporter(env.sidecar, transport, timeout=120)
    try:
        ok, elapsed = export_recorded(env.ledger, exporter, spans)
    finally:
        exporter.shutdown()
    log(f"{env.name}: big request {'acknowledged' if ok else 'refused'} after {elapsed:.1f}s")
    if ok:
        env.wait_delivered(drain)
    time.sleep(settle)
    env.stop_clients()
    env.wait_delivered(15)
    return ok, elapsed


def scenario_large_message(settings: Settings) -> Row:
    """6. One span carrying a 20 MB (quick: 5 MB) gen_ai.input.messages, over HTTP."""
    size = 5 * MIB if settings.quick else 20 * MIB
    with environment("large-message", settings) as env:
        env.good_client("grpc")
        time.sleep(0.5)
        spans = large_message_span(size)
        ok, elapsed = _one_bad_request(env, spans, "http", 1.0, 60)
        truncated = env.metric("otelsignals_analyzer_truncated_total")
        row = env.finish(
            latency_gate=True,
            checks=[(ok, "large span refused")],
            notes=[
                f"{env.ledger.largest_request / MIB:.1f} MiB request, ack in {elapsed * 1000:.0f} ms",
                f"analyzer truncations {truncated:.0f}",
            ],
        )
    row.scenario = f"one span with a {size // MIB} MB gen_ai.input.messages (HTTP)"
    return row


def scenario_indexed_messages(settings: Settings) -> Row:
    """7. One GenAI span with 50k gen_ai.prompt.{i}.role/content messages."""
    count = 50_000
    with environment("indexed-messages", settings) as env:
        env.good_client("grpc")
        time.sleep(0.5)
        spans = indexed_messages_span(count)
        ok, elapsed = _one_bad_request(env, spans, "http", 1.0, 60)
        truncated = env.metric("otelsignals_analyzer_truncated_total")
        row = env.finish(
            latency_gate=True,
            notes=[
                f"{env.ledger.largest_request / MIB:.1f} MiB request, "
                f"{'ack' if ok else 'refused'} in {elapsed * 1000:.0f} ms",
                f"analyzer truncations {truncated:.0f}",
            ],
        )
    row.scenario = f"one span with {count // 1000}k indexed gen_ai.prompt.* messages (HTTP)"
    return row


BOMB_BYTES = 250 * MIB


def send_bombs(endpoint: str, count: int) -> dict[str, Any]:
    """``count`` gRPC exports at once, each 250 MiB of zeros that grpc gzips to ~250 KiB on the
    wire; the status each got, and the gzip size (zlib level 6, as grpc's default)."""
    bomb = b"\x00" * BOMB_BYTES
    answers: list[str] = []

    def send() -> None:
        options = [("grpc.max_send_message_length", -1)]
        with grpc.insecure_channel(endpoint, options=options) as channel:
            call = channel.unary_unary(TRACES_METHOD)
            try:
                call(bomb, timeout=30, compression=grpc.Compression.Gzip)
            except grpc.RpcError as err:
                answers.append(err.code().name)
            else:
                answers.append("OK")

    threads = [threading.Thread(target=send, name=f"bomb-{i}") for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    step = 16 * MIB
    wire = sum(len(compressor.compress(bomb[i : i + step])) for i in range(0, len(bomb), step))
    return {"answers": answers, "wire_bytes": wire + len(compressor.flush())}


def scenario_gzip_bomb(settings: Settings) -> Row:
    """8. Four gRPC requests of ~250 KiB of gzip inflating to 250 MiB each, at once.

    The bombs are sent from a child process at nice 19: compressing 4 x 250 MiB is the attacker's
    CPU, which in real life is not on the sidecar's machine; at normal priority on a 2-core box it
    would also slow the good client's own process and blur what the sidecar does."""
    bombs = 4
    with environment("gzip-bomb", settings) as env:
        env.good_client("grpc")
        time.sleep(0.5)
        before = env.metric("otelsignals_receiver_rejected_requests_total", transport="grpc")
        sender = subprocess.run(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--send-bombs",
                env.sidecar.grpc_endpoint,
                str(bombs),
            ],
            capture_output=True,
            timeout=120,
            check=True,
        )
        result = json.loads(sender.stdout)
        answers: list[str] = result["answers"]
        wire = int(result["wire_bytes"])
        for answer in answers:
            env.ledger.record([], wire, ok=answer == "OK", count=1)
        for _ in range(bombs - len(answers)):  # no answer within the timeout: sent, not acknowledged
            env.ledger.record([], wire, ok=False, count=1)
        time.sleep(1.0)
        env.stop_clients()
        env.wait_delivered(10)
        rejected = env.metric("otelsignals_receiver_rejected_requests_total", transport="grpc") - before
        row = env.finish(
            latency_gate=True,
            checks=[(answers.count("OK") == 0, "a bomb was acknowledged")],
            notes=[
                f"{bombs} bombs of {wire / KIB:.0f} KiB -> 250 MiB (sent at nice 19)",
                "answers " + ",".join(sorted(answers)),
                f"rejected counter +{rejected:.0f}",
            ],
        )
    row.scenario = f"gzip bomb over gRPC x{bombs} at once"
    return row


def closed_by_peer(sock: socket.socket) -> bool:
    """The peer closed it (an answer such as a 503 may come first)."""
    sock.settimeout(0)
    try:
        while sock.recv(65536):
            pass
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def scenario_idle_connections(settings: Settings) -> Row:
    """9. 3,000 idle HTTP connections opened and held while good clients use HTTP and gRPC."""
    wanted = 3000
    hold = 3.0 if settings.quick else 8.0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with environment("idle-connections", settings) as env:
        env.good_client("grpc")
        env.good_client("http")
        time.sleep(0.3)
        idle: list[socket.socket] = []
        failed = 0
        opening = time.monotonic()
        try:
            for _ in range(wanted):
                try:
                    idle.append(socket.create_connection(("127.0.0.1", env.sidecar.http_port), timeout=2))
                except OSError:
                    failed += 1
            opening = time.monotonic() - opening
            log(
                f"idle-connections: {len(idle)} open, {failed} failed, in {opening:.1f}s; holding {hold:.0f}s"
            )
            time.sleep(hold)
            closed = sum(1 for sock in idle if closed_by_peer(sock))
        finally:
            for sock in idle:
                sock.close()
        time.sleep(0.5)
        env.stop_clients()
        env.wait_delivered(10)
        refused = env.metric("otelsignals_receiver_rejected_requests_total", reason="too_many_connections")
        row = env.finish(
            latency_gate=True,
            notes=[
                f"{len(idle)} connected in {opening:.1f}s ({failed} failed), {closed} closed by the sidecar",
                f"too_many_connections {refused:.0f}",
                f"RLIMIT_NOFILE {max(soft, hard)}",
            ],
        )
    row.scenario = f"{wanted} idle HTTP connections held {hold:.0f}s"
    return row


SCENARIOS: dict[str, Callable[[Settings], Row]] = {
    "outage": scenario_outage,
    **{
        name: (lambda settings, name=name: scenario_retry_after(name, settings))  # type: ignore[misc]
        for name in RETRY_VARIANTS
    },
    "http-400": scenario_permanent_400,
    "slow": scenario_slow,
    "sigkill": scenario_sigkill,
    "large-message": scenario_large_message,
    "indexed-messages": scenario_indexed_messages,
    "gzip-bomb": scenario_gzip_bomb,
    "idle-connections": scenario_idle_connections,
}


def run_scenario(name: str, settings: Settings | None = None) -> Row:
    settings = settings or Settings()
    started = time.monotonic()
    try:
        row = SCENARIOS[name](settings)
    except Exception as exc:  # a harness failure is a row too, not a lost table
        log(f"{name}: harness error {exc!r}")
        row = Row(name, 0, 0, 0, 0, 0, None, 0.0, 0.0, 0.0, 0, f"ERROR: {type(exc).__name__}: {exc}"[:300])
    row.seconds = time.monotonic() - started
    log(f"{name}: {row.verdict} ({row.seconds:.0f}s)")
    return row


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short outages, 5 MB large message")
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=list(SCENARIOS), help="run only these")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the rows as JSON")
    parser.add_argument("--list", action="store_true", help="list the scenario names and exit")
    parser.add_argument("--send-bombs", nargs=2, metavar=("ENDPOINT", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.send_bombs:  # the gzip-bomb scenario's child process
        os.nice(19)
        print(json.dumps(send_bombs(args.send_bombs[0], int(args.send_bombs[1]))))
        return 0
    if args.list:
        print("\n".join(SCENARIOS))
        return 0
    logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)  # SDK retry chatter
    settings = Settings(quick=args.quick)
    started = time.monotonic()
    rows = [run_scenario(name, settings) for name in (args.only or SCENARIOS)]
    log(f"done in {time.monotonic() - started:.0f}s")
    print(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(row) for row in rows], indent=2))
    return 0 if all(row.passed for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
