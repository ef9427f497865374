# ruff: noqa: B018 — the bare attribute expressions are the allowlist: vulture counts them as uses.
"""Names only a framework calls, for vulture (scripts/dead-code): it cannot see those calls."""

from aiohttp.abc import AbstractStreamWriter

from otelsignals.demo.traffic import _SpanCounter
from otelsignals.evals.judge import Judge
from otelsignals.native import _SourceFirst
from otelsignals.net import GuardedConnection
from otelsignals.pipeline.grpc_receiver import _GrpcAuthentication

_SpanCounter.on_end  # the OpenTelemetry SDK calls a SpanProcessor's on_end
_GrpcAuthentication.intercept_service  # grpc.aio calls a ServerInterceptor's intercept_service
_SourceFirst.find_spec  # the import system calls a meta path finder's find_spec
GuardedConnection.log_exception  # aiohttp's request handler calls it for a request it cannot handle
AbstractStreamWriter.output_size  # aiohttp reads it (set to 0 after a 100 Continue: http_receiver.py)
# The judge's metrics are called by name (the metric names users list in evals.judge.metrics).
Judge.step_efficiency
Judge.plan_adherence
Judge.plan_quality
