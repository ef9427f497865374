"""Scale-out: two otelsignals processes sharing Redis, with the traffic split by session (as the
Collector's load_balancing exporter does), give the same enriched spans and the same reputation as
one process."""

from __future__ import annotations

import hashlib
import urllib.request

import orjson
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otelsignals.conventions.decoding import any_value
from otelsignals.demo.traffic import send_demo_traffic
from tests.support.clients import export_grpc
from tests.support.otlp_sink import OtlpSink
from tests.support.servers import run_redis
from tests.support.sidecar import SidecarProcess

# Order-dependent by design: the streak and hence the score depend on how evaluations interleave.
ORDER_DEPENDENT = ("signals.reputation.",)


def demo_by_conversation() -> dict[str, list]:
    memory = InMemorySpanExporter()
    send_demo_traffic(None, None, _exporter_factory=lambda service, transport: memory)
    spans = list(memory.get_finished_spans())
    conversation_of_trace = {
        span.context.trace_id: span.attributes["otelsignals.demo.conversation_id"]
        for span in spans
        if "otelsignals.demo.conversation_id" in (span.attributes or {})
    }
    grouped: dict[str, list] = {}
    for span in spans:
        grouped.setdefault(conversation_of_trace[span.context.trace_id], []).append(span)
    return grouped


def enrichment(sink: OtlpSink) -> dict[bytes, dict]:
    out = {}
    for request in sink.resource_spans():
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    attributes = {
                        kv.key: any_value(kv.value)
                        for kv in span.attributes
                        if kv.key.startswith("signals.") and not kv.key.startswith(ORDER_DEPENDENT)
                    }
                    events = sorted(e.name for e in span.events if e.name.startswith("signal."))
                    out[span.span_id] = {"name": span.name, "attributes": attributes, "events": events}
    return out


def reputation_of(sidecar: SidecarProcess) -> dict[str, tuple]:
    with urllib.request.urlopen(f"{sidecar.admin_url}/v1/reputation", timeout=10) as answer:
        agents = orjson.loads(answer.read())["agents"]
    return {
        a["agent_id"]: (
            a["eval_count"],
            a["lifecycle"],
            a["components"]["pass_rate"],
            a["components"]["latency"],
            a["components"]["volume"],
        )
        for a in agents
    }


def run(tmp_path, redis_url: str, conversations: dict[str, list], replicas: int):
    with OtlpSink().start() as sink:
        sidecars = [
            SidecarProcess(
                tmp_path / f"replica-{n}",
                {"endpoint": sink.grpc_endpoint},
                store={"url": redis_url},
                reputation={"calibration": 3},
            )
            for n in range(replicas)
        ]
        for sidecar in sidecars:
            sidecar.workdir.mkdir(parents=True, exist_ok=True)
            sidecar.start()
        try:
            total = 0
            for conversation_id, spans in sorted(conversations.items()):
                # Route by session, as the gateway Collector does: one conversation, one replica.
                replica = int(hashlib.sha256(conversation_id.encode()).hexdigest(), 16) % replicas
                export_grpc(sidecars[replica].grpc_endpoint, spans)
                total += len(spans)
            sink.wait_for_spans(total, timeout=30)
            for sidecar in sidecars:
                turns = sidecar.metric("otelsignals_analysed_turns_total")
                assert turns > 0, "every replica took part"
                sidecar.wait_for_metric("otelsignals_reputation_evaluations_total", turns)
            reputation = reputation_of(sidecars[0])
            assert all(reputation_of(s) == reputation for s in sidecars[1:]), "replicas share one view"
            return enrichment(sink), reputation
        finally:
            for sidecar in sidecars:
                sidecar.__exit__()


def test_two_replicas_sharing_redis_match_one_process(tmp_path):
    conversations = demo_by_conversation()
    with run_redis() as single_store:
        single, single_reputation = run(tmp_path / "single", single_store, conversations, 1)
    with run_redis() as shared_store:
        split, split_reputation = run(tmp_path / "split", shared_store, conversations, 2)
    assert single == split
    assert any(entry["attributes"] for entry in single.values()), "spans were enriched at all"
    assert split_reputation == single_reputation
    assert sum(entry[0] for entry in single_reputation.values()) > 0
