"""GenAI content sent as OTLP log records is joined to its span, whichever arrives first."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from otelsignals.config import AnalyzerConfig, ByteSize
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


def test_late_log_records_are_cut_to_the_analysis_limits_like_span_content():
    # Content that arrives after its span must not get past analyzer.max_message_bytes: one
    # client's huge log record would otherwise reach every detector whole.
    huge = "I was charged twice and nobody answers my emails. " * 200  # 10 KB of user text
    request = logs()
    for resource_logs in request.resource_logs:
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                for attribute in record.attributes:
                    if attribute.key == "gen_ai.input.messages":
                        for message in attribute.value.array_value.values:
                            for part in _parts_of(message):
                                part.string_value = huge
    telemetry = Telemetry()
    analyzer = Analyzer(telemetry, limits=AnalyzerConfig(max_message_bytes=ByteSize(2048)))
    for trace in traces_in_time_order(read_requests(FIXTURE / "tools.binpb")):
        analyzer.process(trace)
    analyzer.log_events.add(request)
    assert analyzer.apply_late_log_events()
    texts = [m.content or "" for m in conversation(analyzer).messages if m.role is Role.USER]
    assert texts and all(len(text.encode()) <= 2048 and huge.startswith(text) for text in texts)
    assert telemetry.truncated_for_analysis.labels("message_bytes")._value.get() >= 1


def test_a_reader_failing_on_one_late_span_leaves_the_others_read():
    analyzer = Analyzer(Telemetry())
    for trace in traces_in_time_order(read_requests(FIXTURE / "tools.binpb")):
        analyzer.process(trace)
    analyzer.log_events.add(logs())
    waiting = len(analyzer.log_events.waiting_spans())
    read = analyzer.decoder.read
    calls = []

    def failing_once(view, memory):
        calls.append(view.span_id)
        if len(calls) == 1:
            raise ValueError("a reader bug")
        return read(view, memory)

    analyzer.decoder.read = failing_once  # type: ignore[method-assign]
    analyses = analyzer.apply_late_log_events()
    assert waiting > 1 and len(calls) == waiting
    assert len(analyses) >= 1 and len(analyzer.log_events) == 0
    assert analyzer.telemetry.unreadable_spans.labels("reader_error")._value.get() == 1


def test_late_log_records_keep_the_conversation_within_max_messages():
    from otelsignals.config import SessionsConfig

    analyzer = Analyzer(Telemetry(), SessionsConfig(max_messages=3))
    for trace in traces_in_time_order(read_requests(FIXTURE / "tools.binpb")):
        analyzer.process(trace)
    analyzer.log_events.add(logs())
    assert analyzer.apply_late_log_events()
    assert len(conversation(analyzer).messages) <= 3


def _parts_of(message):
    """The text values of one GenAI input message (a kvlist with role and parts) sent by a user."""
    fields = {kv.key: kv.value for kv in message.kvlist_value.values}
    if fields["role"].string_value != "user":
        return []
    values = []
    for part in fields["parts"].array_value.values:
        for kv in part.kvlist_value.values:
            if kv.key == "content":
                values.append(kv.value)
    return values


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
