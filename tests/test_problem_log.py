"""Repeated problems in the log: the start of each kind, a count at most every summary interval, one
line when it is over (telemetry.ProblemLog), with an injected clock; then the real sidecar through a
downstream outage."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import SpanExportResult
from prometheus_client import CollectorRegistry

from otelsignals.config import IndexConfig
from otelsignals.config_loading import load_config
from otelsignals.conversation import ConversationState
from otelsignals.model import Message, Role
from otelsignals.pipeline.exporter import OUTAGE_PROBLEMS
from otelsignals.pipeline.index_writer import IndexWriter
from otelsignals.stores.conversation_index import open_index
from otelsignals.telemetry import ProblemLog
from tests.support.clients import export_grpc, make_spans
from tests.support.otlp_sink import OtlpSink
from tests.support.sidecar import SidecarProcess

INTERVAL = 300.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Lines(logging.Handler):
    """The otelsignals logger's records (it does not propagate once logging is set up)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def take(self) -> list[tuple[str, str, dict[str, object]]]:
        """(level, message, fields) of the records since the last take."""
        taken = [(r.levelname, r.getMessage(), dict(getattr(r, "fields", {}))) for r in self.records]
        self.records.clear()
        return taken


@pytest.fixture
def lines() -> Iterator[Lines]:
    logger = logging.getLogger("otelsignals")
    handler, level = Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def problems(clock: Clock) -> ProblemLog:
    return ProblemLog(INTERVAL, clock=clock)


def test_the_first_occurrence_is_logged_and_repeats_are_summarised_once_per_interval(
    problems: ProblemLog, clock: Clock, lines: Lines
) -> None:
    problems.warning("rejected_bad_json", "refused a request: bad JSON at resourceSpans", transport="http")
    [(level, message, fields)] = lines.take()
    assert level == "WARNING" and message.startswith("refused a request: bad JSON at resourceSpans (")
    assert "summarised here at most every 5m" in message
    assert fields == {"kind": "rejected_bad_json", "transport": "http"}
    for second in range(1, 300):  # a flood, just short of the interval: counted, not logged
        clock.now = 1000.0 + second
        problems.warning("rejected_bad_json", f"refused a request: bad JSON #{second}", transport="http")
        problems.tick()
    assert lines.take() == []
    clock.now = 1000.0 + INTERVAL
    problems.warning("rejected_bad_json", "refused a request: bad JSON #300", transport="http")
    [(level, message, fields)] = lines.take()
    assert level == "WARNING"
    assert message == (
        "'rejected_bad_json' happened 300 more times in the last 5m; "
        "the latest: refused a request: bad JSON #300"
    )
    assert fields == {"kind": "rejected_bad_json", "repeats": 300, "ongoing": True, "transport": "http"}
    # The next summary waits for the next interval.
    clock.now += INTERVAL - 1
    problems.warning("rejected_bad_json", "refused a request: bad JSON #301", transport="http")
    problems.tick()
    assert lines.take() == []


def test_a_burst_that_stopped_is_summarised_by_the_ticker(
    problems: ProblemLog, clock: Clock, lines: Lines
) -> None:
    for _ in range(5):
        problems.warning("not_protobuf", "refused a request: not protobuf")
    lines.take()
    clock.now += INTERVAL - 1
    problems.tick()
    assert lines.take() == []
    clock.now += 1
    problems.tick()
    [(_, message, fields)] = lines.take()
    assert message.startswith("'not_protobuf' happened 4 more times in the last 5m;")
    assert fields["repeats"] == 4
    clock.now += 10 * INTERVAL
    problems.tick()  # nothing new: nothing to say
    assert lines.take() == []


def test_the_end_of_a_problem_is_logged_once_and_a_later_one_is_new(
    problems: ProblemLog, clock: Clock, lines: Lines
) -> None:
    problems.recovered("export_", "downstream takes batches again")  # nothing was failing
    assert lines.take() == []
    for _ in range(3):
        problems.warning(
            "export_retry_unavailable", "downstream refused a batch; retrying", reason="unavailable"
        )
    lines.take()
    clock.now += 30
    problems.recovered("export_", "downstream takes batches again")
    problems.recovered("export_", "downstream takes batches again")
    assert lines.take() == [
        (
            "INFO",
            "downstream takes batches again "
            "('export_retry_unavailable' over; 2 occurrences since the last line)",
            {"kind": "export_retry_unavailable", "recovered": True, "repeats": 2},
        )
    ]
    clock.now += INTERVAL
    problems.tick()
    assert lines.take() == []  # the count went with the recovery line
    problems.warning("export_retry_unavailable", "downstream refused a batch again; retrying")
    [(level, message, fields)] = lines.take()
    assert level == "WARNING" and message.startswith("downstream refused a batch again; retrying (")
    assert fields == {"kind": "export_retry_unavailable"}


def test_a_delivered_batch_ends_the_outage_kinds_in_one_line_and_no_other(
    problems: ProblemLog, lines: Lines
) -> None:
    problems.warning("export_retry_unavailable", "retrying")
    problems.warning("export_retry_http_503", "retrying")
    problems.warning("export_failed_queue_full", "dropped")
    problems.warning("export_failed_http_400", "downstream refused a batch for its content")
    problems.warning("rejected_bad_json", "bad JSON")
    lines.take()
    problems.recovered(OUTAGE_PROBLEMS, "downstream takes batches again")
    [(_, message, fields)] = lines.take()
    assert message == (
        "downstream takes batches again "
        "('export_retry_unavailable', 'export_retry_http_503', 'export_failed_queue_full' over)"
    )
    assert fields["kind"] == "export_retry_unavailable,export_retry_http_503,export_failed_queue_full"
    # A refusal for the batch's content, and bad input, are not outages: still open.
    problems.recovered(("export_failed_http_", "rejected_"), "other kinds over")
    [(_, _, fields)] = lines.take()
    assert fields["kind"] == "export_failed_http_400,rejected_bad_json"


def test_a_flapping_problem_does_not_get_a_line_per_flap(
    problems: ProblemLog, clock: Clock, lines: Lines
) -> None:
    problems.warning("reputation_store_error", "reputation store failed: connection refused")
    problems.recovered("reputation_store_error", "the reputation store records again")
    assert [level for level, _, _ in lines.take()] == ["WARNING", "INFO"]
    for _ in range(20):  # fails and works again, every few seconds
        clock.now += 5
        problems.warning("reputation_store_error", "reputation store failed: connection refused")
        clock.now += 5
        problems.recovered("reputation_store_error", "the reputation store records again")
        problems.tick()
    assert lines.take() == []
    clock.now += INTERVAL
    problems.tick()
    [(level, message, fields)] = lines.take()
    assert level == "WARNING" and message.startswith("'reputation_store_error' happened 20 more times")
    assert fields["ongoing"] is False


def test_an_index_that_fails_and_comes_back_is_logged_at_both_ends(tmp_path: Path, lines: Lines) -> None:
    clock = Clock()
    url = f"sqlite:///{tmp_path / 'index.db'}"
    writer = IndexWriter(
        IndexConfig(), open_index(url), CollectorRegistry(), keep_text=False, problems=ProblemLog(60, clock)
    )
    state = ConversationState.new("c1")
    state.append(Message(Role.USER, "my order never came", span_id=b"\x01" * 8))
    writer.index.close()  # the database goes away: every flush fails and the row waits
    for _ in range(4):
        writer.record(state)
        writer.flush()
        clock.now += 1
    writer.index = open_index(url)
    writer.flush()
    taken = lines.take()
    assert [(level, fields["kind"]) for level, _, fields in taken] == [
        ("WARNING", "index_write_error"),
        ("INFO", "index_write_error"),
    ]
    assert taken[0][1].startswith("writing the conversation index failed; retrying: ")
    assert taken[1][1] == (
        "writing the conversation index works again "
        "('index_write_error' over; 3 occurrences since the last line)"
    )
    assert writer.index.get("c1") is not None
    writer.index.close()


def test_summary_interval_is_a_config_key_that_must_be_positive() -> None:
    assert load_config(None, environ={}).log.summary_interval == INTERVAL
    assert load_config(None, environ={"OTELSIGNALS_LOG__SUMMARY_INTERVAL": "1m"}).log.summary_interval == 60.0
    assert load_config(None, environ={"OTELSIGNALS_LOG__SUMMARY_INTERVAL": "0s"}).validate() == [
        "log.summary_interval: must be greater than 0, got 0s"
    ]


def test_a_downstream_outage_is_logged_when_it_starts_and_when_it_ends(
    tmp_path: Path, sink: OtlpSink
) -> None:
    """The real sidecar: retries during the outage are one line, the first batch through after it another."""
    exporter = {
        "endpoint": sink.grpc_endpoint,
        "protocol": "grpc",
        "retry": {"initial_interval": "100ms", "max_interval": "100ms", "randomization_factor": 0.0},
    }
    spans = make_spans(4, 2)
    with SidecarProcess(tmp_path, exporter) as sidecar:
        sink.set_down(True)
        assert export_grpc(sidecar.grpc_endpoint, spans) is SpanExportResult.SUCCESS
        sidecar.wait_for_metric("otelsignals_exporter_retries_total", 5)
        sink.set_down(False)
        sink.wait_for_spans(len(spans), timeout=15)
        sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", len(spans))
        records = [r for r in sidecar.log_records() if str(r.get("kind", "")).startswith("export_")]
    assert [(r["level"], r.get("recovered", False)) for r in records] == [("warning", False), ("info", True)]
    assert records[1]["message"].startswith("downstream takes batches again (")
    assert records[1]["repeats"] >= 4
