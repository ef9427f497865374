"""GenAI content sent as OTLP log records is joined to its span, whichever arrives first."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from otelsignals.model import Role
from otelsignals.offline import read_requests, traces_in_time_order
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.pipeline.log_events import LogEventBuffer
from otelsignals.telemetry import Telemetry

FIXTURE = Path(__file__).parents[1] / "fixtures" / "openai_v2_events"


def logs() -> ExportLogsServiceRequest:
    return ExportLogsServiceRequest.FromString((FIXTURE / "tools.logs.binpb").read_bytes())


def conversation(analyzer: Analyzer):
    (state,) = list(analyzer.sessions)
    return state.conversation


def test_log_records_that_arrive_after_their_spans_still_give_the_conversation():
    before, after = Analyzer(Telemetry()), Analyzer(Telemetry())
    traces = traces_in_time_order(read_requests(FIXTURE / "tools.binpb"))
    before.log_events.add(logs())
    for trace in traces:
        before.process(trace)
    for trace in traces:  # the spans first, their content later
        after.process(trace)
    assert not any(m.role is Role.USER for m in conversation(after).messages)
    after.log_events.add(logs())
    analyses = after.apply_late_log_events()
    assert analyses and len(after.log_events) == 0
    late, early = conversation(after), conversation(before)
    assert [m.content for m in late.messages if m.role is Role.USER] == [
        m.content for m in early.messages if m.role is Role.USER
    ]
    assert len(late.llm_calls) == len(early.llm_calls), "model calls are not counted twice"
    assert late.content_captured


def test_events_of_spans_that_never_come_are_forgotten_and_counted():
    now = [0.0]
    forgotten: list[int] = []
    buffer = LogEventBuffer(ttl=10, max_events=1000, on_forget=forgotten.append, clock=lambda: now[0])
    kept = buffer.add(logs())
    assert kept > 0 and len(buffer) == kept
    now[0] = 11
    buffer.expire()
    assert len(buffer) == 0 and sum(forgotten) == kept


def test_non_genai_log_records_are_ignored():
    request = ExportLogsServiceRequest()
    record = request.resource_logs.add().scope_logs.add().log_records.add()
    record.event_name = "http.request"
    record.span_id, record.trace_id = b"\x01" * 8, b"\x02" * 16
    assert LogEventBuffer().add(request) == 0


def test_tool_spans_are_not_kept_waiting_for_log_records():
    # A tool span says its call and result in attributes: remembering it for late log records
    # would only hold ~1 KB per tool call (up to the analyzer's bound of 50,000 spans).
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from bench.agent_workload import build_workload
    from otelsignals.otlp.wire import split_request
    from otelsignals.pipeline.assembler import Assembler, ReleasedTrace

    analyzer = Analyzer(Telemetry())
    released: list[ReleasedTrace] = []
    assembler = Assembler(released.append, lambda record: None, decision_wait=2.0)
    for turn in build_workload(2, 1, seed=5).turns[:3]:
        assembler.add(split_request(ExportTraceServiceRequest.FromString(turn.body)).records)
    tool_spans = 0
    for trace in released:
        assert analyzer.process(trace) is not None
        tool_spans += sum(b"execute_tool" in record.data for record in trace.spans)
    assert tool_spans >= 3
    assert analyzer._read_spans == {}
