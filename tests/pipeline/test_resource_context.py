"""A request's resource and scope are read once for all requests that send the same bytes."""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from bench.agent_workload import build_workload
from otelsignals.config_loading import load_config
from otelsignals.otlp.wire import split_request
from otelsignals.pipeline import analyzer as analyzer_module
from otelsignals.pipeline.assembler import Assembler, ReleasedTrace
from otelsignals.telemetry import Telemetry


def _resources_read(monkeypatch, bodies: list[bytes]) -> int:
    """How many times the analyzer read a resource's attributes over ``bodies``."""
    read = 0
    original = analyzer_module.key_values

    def counted(attributes):  # the resource's attributes read into a dict
        nonlocal read
        read += 1
        return original(attributes)

    monkeypatch.setattr(analyzer_module, "key_values", counted)
    config = load_config(None, environ={})
    analyzer = analyzer_module.Analyzer(
        Telemetry(), config.sessions, config.signals, config.evals, config.analyzer
    )
    released: list[ReleasedTrace] = []
    assembler = Assembler(released.append, lambda record: None, decision_wait=2.0)
    for body in bodies:
        assembler.add(split_request(ExportTraceServiceRequest.FromString(body)).records)
        for trace in released:
            analyzer.process(trace)
        released.clear()
    assert len(analyzer.sessions) == 2
    return read


def test_equal_resource_bytes_are_read_once(monkeypatch):
    turns = build_workload(2, 1, seed=16).turns
    requests = [turn.body for turn in turns]
    scopes = set()
    for body in requests:
        for resource_spans in ExportTraceServiceRequest.FromString(body).resource_spans:
            resource = resource_spans.resource.SerializeToString()
            for scope_spans in resource_spans.scope_spans:
                scopes.add((resource, scope_spans.scope.SerializeToString()))
    read = _resources_read(monkeypatch, requests)
    assert len(requests) > 20
    # one read per distinct (resource, scope) pair the GenAI spans came under, not one per request
    assert 0 < read <= len(scopes) < len(requests)
