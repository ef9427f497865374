"""``otelsignals analyze``: the pipeline's assembly and analysis over OTLP files, with no server.

Files are read whole, spans grouped by trace, and traces analysed in the order they started, so a
conversation spread over many traces (and many files) builds up as it did live.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otelsignals.analysis import Analysis
from otelsignals.config import Config
from otelsignals.otlp.json_decode import OtlpJsonError, decode_logs_request, decode_trace_request
from otelsignals.otlp.wire import SpanRecord, encode_request, split_request
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.pipeline.assembler import ReleasedTrace
from otelsignals.pipeline.enricher import Enricher
from otelsignals.telemetry import Telemetry


class InputError(ValueError):
    """A file that cannot be read as OTLP; the message names the file (and line)."""


OtlpRequest = ExportTraceServiceRequest | ExportLogsServiceRequest


def read_otlp(path: Path) -> Iterator[OtlpRequest]:
    """The OTLP requests of a file: traces, or logs (GenAI events sent as log records, which the
    analysis joins to their spans as the sidecar does). A protobuf file holds logs when its name
    says so (``….logs.binpb``) or when it is not a trace request; a JSON one when it has
    ``resourceLogs``."""
    suffix = path.suffix.lower()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror}") from exc
    if suffix in (".binpb", ".pb"):
        yield _protobuf_request(path, data)
    elif suffix == ".json":
        yield _json_request(path, data)
    elif suffix == ".jsonl":
        for number, line in enumerate(data.splitlines(), start=1):
            if line.strip():
                yield _json_request(path, line, f":{number}")
    else:
        raise InputError(f"{path}: unknown file type (expected .binpb, .pb, .json or .jsonl)")


def read_requests(path: Path) -> Iterator[ExportTraceServiceRequest]:
    """The trace requests of a file (none from a file of logs)."""
    for request in read_otlp(path):
        if isinstance(request, ExportTraceServiceRequest):
            yield request


def _protobuf_request(path: Path, data: bytes) -> OtlpRequest:
    kinds: tuple[type[OtlpRequest], ...] = (ExportTraceServiceRequest, ExportLogsServiceRequest)
    if path.stem.lower().endswith(".logs"):
        kinds = kinds[::-1]
    for kind in kinds:
        try:
            return kind.FromString(data)
        except Exception:
            continue
    raise InputError(f"{path}: not a protobuf ExportTraceServiceRequest or ExportLogsServiceRequest")


def _json_request(path: Path, data: bytes, where: str = "") -> OtlpRequest:
    try:
        if _has_key(data, b'"resourceLogs"'):
            return decode_logs_request(data)
        return decode_trace_request(data)
    except OtlpJsonError as exc:
        raise InputError(f"{path}{where}: {exc}") from exc


def _has_key(data: bytes, key: bytes) -> bool:
    """Whether the top-level JSON object names ``key``: a search of its text (a value that quotes
    the key would mislead it, and then the decoder says what is wrong)."""
    return key in data


@dataclass
class OfflineResult:
    trace: ReleasedTrace
    analysis: Analysis | None


def traces_in_time_order(requests: Iterable[ExportTraceServiceRequest]) -> list[ReleasedTrace]:
    by_trace: dict[bytes, list[SpanRecord]] = {}
    seen: set[tuple[bytes, bytes]] = set()
    for request in requests:
        for record in split_request(request).records:
            if (record.trace_id, record.span_id) in seen:  # the same span in two files: keep one
                continue
            seen.add((record.trace_id, record.span_id))
            by_trace.setdefault(record.trace_id, []).append(record)

    def started(records: list[SpanRecord]) -> int:
        return min(Span.FromString(r.data).start_time_unix_nano for r in records)

    ordered = sorted(by_trace.items(), key=lambda item: started(item[1]))
    return [
        ReleasedTrace(trace_id, records, "complete", sum(len(r.data) for r in records))
        for trace_id, records in ordered
    ]


def analyze_files(paths: Iterable[Path], config: Config) -> Iterator[OfflineResult]:
    analyzer = Analyzer(
        Telemetry(config.log.summary_interval), config.sessions, config.signals, limits=config.analyzer
    )
    enricher = Enricher(config.signals)
    traces: list[ExportTraceServiceRequest] = []
    for path in paths:
        for request in read_otlp(path):
            if isinstance(request, ExportLogsServiceRequest):
                analyzer.log_events.add(request)  # joined to their spans when these are read
            else:
                traces.append(request)
    for trace in traces_in_time_order(traces):
        analysis = analyzer.process(trace)
        if analysis is not None:
            enricher.enrich(trace, analysis)
        yield OfflineResult(trace, analysis)


def encode_trace(trace: ReleasedTrace) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest.FromString(encode_request(trace.spans))
