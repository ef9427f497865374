"""The triage sampler in the live pipeline: only informative conversations leave, marked, and the
rest is counted by reason."""

from __future__ import annotations

from otelsignals.conventions.decoding import any_value
from otelsignals.demo.traffic import send_demo_traffic
from tests.support.otlp_sink import OtlpSink
from tests.support.sidecar import SidecarProcess

TIGHT = {
    "enabled": True,
    "baseline_rate": 0.0,
    "exemplars_per_minute": 0,
    "exemplars_per_agent_per_minute": 0,
    "category_weights": {"execution.failure": 0.0},
}


def test_only_flagged_and_failing_conversations_are_forwarded(tmp_path, sink: OtlpSink):
    with SidecarProcess(tmp_path, {"endpoint": sink.grpc_endpoint}, sampler=TIGHT) as sidecar:
        stats = send_demo_traffic(sidecar.grpc_endpoint, None)
        analysed = sidecar.wait_for_metric("otelsignals_analysed_turns_total", stats.traces)
        kept = sidecar.metric("otelsignals_sampler_kept_traces_total")
        dropped = sidecar.metric("otelsignals_sampler_dropped_traces_total")
        assert kept + dropped == analysed and kept > 0 and dropped > 0
        assert sidecar.metric("otelsignals_sampler_dropped_traces_total", reason="sampled_out") > 0
        sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", 1)
        assert sidecar.stop() == 0
    by_trace: dict[bytes, list] = {}
    for request in sink.resource_spans():
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    by_trace.setdefault(span.trace_id, []).append(span)
    assert 0 < len(by_trace) < stats.traces
    for spans in by_trace.values():
        marks = [
            {kv.key: any_value(kv.value) for kv in span.attributes if kv.key.startswith("signals.sample")}
            for span in spans
        ]
        reasons = {m["signals.sample_reason"] for m in marks if m.get("signals.sampled") is True}
        # "priority": the triage priority reached sampler.keep_priority (since 2026-12-02 a demo IT
        # conversation does mid-way, while the user's "still says can't connect" stands)
        assert reasons and reasons <= {"severe", "poor", "flagged", "priority", "session"}
        assert all(
            "signals.quality" not in {kv.key for kv in span.attributes}
            or any(kv.key == "signals.sampled" for kv in span.attributes)
            for span in spans
        ), "every enriched span of a kept trace says why it was kept"
