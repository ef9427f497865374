"""Typed configuration: embedded defaults, an optional YAML file, then environment overrides.

Every key has a default here; ``config/otelsignals.yaml`` documents the same keys (a test keeps the
two in step). Environment variables ``OTELSIGNALS_<SECTION>__<KEY>=value`` override any key, with
``__`` separating levels. A value of the wrong type raises :class:`ConfigError` naming the dotted key
as the file is read; then :func:`validate` asks every section's ``validate()`` for the problems a
type cannot express and raises one :class:`ConfigError` listing all of them.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, Literal, Protocol, runtime_checkable

from otelsignals.conversation import CONVERSATION_KEY_ATTRIBUTES
from otelsignals.reputation import ReputationConfig
from otelsignals.scoring import BUCKETS
from otelsignals.signals.taxonomy import CATEGORIES, LEAF_TYPES

ENV_PREFIX = "OTELSIGNALS_"


class ConfigError(ValueError):
    """Configuration that cannot be used. ``problems`` holds every ``(dotted key, what is wrong)``
    found; ``key`` and ``problem`` are the first of them. The message is one line (the CLI prints it)."""

    def __init__(self, key: str, problem: str, *more: tuple[str, str]) -> None:
        self.problems = [(key, problem), *more]
        self.key = key
        self.problem = problem
        described = "; ".join(f"config key '{k}': {p}" for k, p in self.problems)
        super().__init__(f"{len(self.problems)} problems: {described}" if more else described)

    @classmethod
    def from_problems(cls, problems: Sequence[str], section: str = "") -> ConfigError:
        """The error for the problems a ``validate()`` returned (at least one), each
        ``"key: what is wrong"`` with the key relative to ``section``."""
        first, *more = (_split_problem(problem) for problem in in_section(section, problems))
        return cls(*first, *more)


def _split_problem(problem: str) -> tuple[str, str]:
    key, _, text = problem.partition(": ")
    return key, text


def in_section(section: str, problems: Sequence[str]) -> list[str]:
    """``problems`` of a subsection, their keys made relative to the section that holds it."""
    return [f"{section}.{problem}" for problem in problems] if section else list(problems)


@runtime_checkable
class ConfigSection(Protocol):
    """A section with rules its value types cannot express."""

    def validate(self) -> list[str]:
        """Every problem found (none: an empty list), each ``"key: what is wrong"``, the key
        relative to the section, the text naming the value and what is allowed."""
        ...


class Duration(float):
    """Seconds. Parsed from numbers or strings such as ``250ms``, ``2s``, ``5m``, ``1h``."""


class ByteSize(int):
    """Bytes. Parsed from integers or strings such as ``512KiB``, ``64MiB``, ``1GB``."""


_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}


def parse_duration(value: Any) -> Duration:
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 2s or 250ms")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h|d)?\s*", str(value))
        if not match:
            raise ValueError(f"expected a duration such as 2s or 250ms, got {value!r}")
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2) or "s"]
    if math.isnan(seconds):  # YAML's .nan: every comparison with it is false, so timers misfire
        raise ValueError("expected a duration such as 2s or 250ms, got NaN")
    if seconds < 0:
        raise ValueError("must not be negative")
    return Duration(seconds)


def parse_byte_size(value: Any) -> ByteSize:
    if isinstance(value, bool):
        raise ValueError("expected a size such as 64MiB")
    if isinstance(value, int):
        size = value
    else:
        match = re.fullmatch(r"\s*([0-9]+)\s*([a-zA-Z]*)\s*", str(value))
        unit = match.group(2).lower() if match else None
        if not match or unit not in _SIZE_UNITS:
            raise ValueError(f"expected a size such as 512KiB or 64MiB, got {value!r}")
        size = int(match.group(1)) * _SIZE_UNITS[unit]
    if size < 0:
        raise ValueError("must not be negative")
    return ByteSize(size)


@dataclass
class GrpcReceiverConfig:
    enabled: bool = True
    endpoint: str = "0.0.0.0:4317"

    def validate(self) -> list[str]:
        return _host_port_problems("endpoint", self.endpoint)


@dataclass
class HttpReceiverConfig:
    enabled: bool = True
    endpoint: str = "0.0.0.0:4318"

    def validate(self) -> list[str]:
        return _host_port_problems("endpoint", self.endpoint)


@dataclass
class ReceiverTlsConfig:
    # Server certificate chain and its private key (PEM), both or neither: when set, both receivers
    # accept TLS only. Read (and checked) at start-up.
    cert_file: str = ""
    key_file: str = ""
    # When set, clients must present a certificate that chains to this CA bundle (mutual TLS).
    client_ca_file: str = ""


@dataclass
class ReceiverAuthConfig:
    # When set (or token_file), every export request on both receivers must carry it, else it is
    # refused (HTTP 401, gRPC UNAUTHENTICATED) before its body is read.
    token: str = ""
    token_file: str = ""
    # "authorization" expects "Bearer <token>"; any other header carries the bare token.
    header: str = "authorization"


@dataclass
class ReceiverConfig:
    grpc: GrpcReceiverConfig = field(default_factory=GrpcReceiverConfig)
    http: HttpReceiverConfig = field(default_factory=HttpReceiverConfig)
    tls: ReceiverTlsConfig = field(default_factory=ReceiverTlsConfig)
    auth: ReceiverAuthConfig = field(default_factory=ReceiverAuthConfig)
    max_message_size: ByteSize = ByteSize(64 * 1024**2)
    # Seconds suggested to clients in Retry-After / RetryInfo when the pipeline is full.
    retry_after: Duration = Duration(1.0)
    # HTTP: a connection with no request in progress (also before its first) is closed after this.
    idle_timeout: Duration = Duration(60.0)
    # HTTP: a request's headers must be complete this long after its first byte; gRPC: the HTTP/2
    # handshake must be complete this long after connecting.
    header_timeout: Duration = Duration(10.0)
    # HTTP: a request's body must have arrived this long after its headers (else 408).
    read_timeout: Duration = Duration(60.0)
    # Open connections per receiver; beyond, new ones are refused (HTTP: 503, closed). Lowered at
    # start-up when the open-files limit could not hold that many.
    max_connections: int = 1000
    # gRPC: connections without calls for this long, or this old, are closed with GOAWAY (0: never).
    grpc_max_connection_idle: Duration = Duration(300.0)
    grpc_max_connection_age: Duration = Duration(1800.0)

    def validate(self) -> list[str]:
        problems = [*in_section("grpc", self.grpc.validate()), *in_section("http", self.http.validate())]
        if self.max_message_size < 1024:
            problems.append(f"max_message_size: must be at least 1KiB, got {self.max_message_size} bytes")
        for key in ("idle_timeout", "header_timeout", "read_timeout"):
            if getattr(self, key) <= 0:
                problems.append(f"{key}: must be greater than 0, got {getattr(self, key):g}s")
        if self.max_connections < 1:
            problems.append(f"max_connections: must be at least 1, got {self.max_connections}")
        header = self.auth.header
        # A name valid both as an HTTP header and as a gRPC (ASCII, not reserved) metadata key.
        lowered = header.lower()
        if (
            not re.fullmatch(r"[a-z0-9][a-z0-9_.-]*", lowered)
            or lowered.endswith("-bin")
            or lowered.startswith("grpc-")
        ):
            problems.append(f"auth.header: expected a header name such as x-api-key, got {header!r}")
        # The files are read and checked by the code that uses them; net.py imports this module.
        from otelsignals.net import load_auth_token, load_server_tls

        for load in (lambda: load_server_tls(self.tls, "tls"), lambda: load_auth_token(self.auth, "auth")):
            try:
                load()
            except ConfigError as exc:
                problems.append(f"{exc.key}: {exc.problem}")
        return problems


@dataclass
class AssemblerConfig:
    decision_wait: Duration = Duration(2.0)
    max_traces: int = 50_000
    max_bytes: ByteSize = ByteSize(256 * 1024**2)
    # How often buffered traces are checked for expiry.
    tick_interval: Duration = Duration(0.1)

    def validate(self) -> list[str]:
        if self.tick_interval <= 0:  # zero would make the expiry ticker spin without sleeping
            return [f"tick_interval: must be greater than 0, got {self.tick_interval:g}s"]
        return []


@dataclass
class TlsConfig:
    insecure: bool = True
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    insecure_skip_verify: bool = False


@dataclass
class BatchConfig:
    max_spans: int = 8192
    max_bytes: ByteSize = ByteSize(4 * 1024**2)
    # A partial batch is made this long after the previous batch (at once when that was longer
    # ago): at most one partial batch per timeout, and a trace after a pause is not held. The added
    # latency's tail grows with it (bench/RESULTS.md: 20 ms against 50 ms gave p99 97 vs 160 ms at
    # 45-48 turns/s of the agent workload), while a batch per turn costs no more CPU.
    timeout: Duration = Duration(0.02)

    def validate(self) -> list[str]:
        if self.max_bytes < 1024:
            return [f"max_bytes: must be at least 1KiB, got {self.max_bytes} bytes"]
        return []


@dataclass
class QueueConfig:
    # With the batches compressed off the event loop, nothing else slows intake down when the
    # downstream cannot keep up: this backlog is then held in memory in full (the manifests' 1 GiB
    # limit counts it: 836 MiB peak at these defaults under sustained overload).
    max_bytes: ByteSize = ByteSize(64 * 1024**2)
    num_consumers: int = 4
    # When set, every accepted request is written here before the client is answered, and only
    # forgotten once downstream has taken its spans: a restart or SIGKILL loses nothing acknowledged.
    directory: str = ""
    fsync: bool = False
    segment_size: ByteSize = ByteSize(64 * 1024**2)

    def validate(self) -> list[str]:
        if self.num_consumers < 1:
            return [f"num_consumers: must be at least 1, got {self.num_consumers}"]
        return []


@dataclass
class RetryConfig:
    enabled: bool = True
    initial_interval: Duration = Duration(1.0)
    max_interval: Duration = Duration(30.0)
    multiplier: float = 1.5
    randomization_factor: float = 0.5
    # Without the disk queue, a batch still refused this long after its first attempt is dropped
    # (reason retry_expired; 0 = no limit). With exporter.queue.directory set, no clock drops data.
    max_elapsed_time: Duration = Duration(300.0)

    def validate(self) -> list[str]:
        problems = []
        if self.multiplier < 1:
            problems.append(f"multiplier: must be at least 1, got {self.multiplier}")
        if not 0 <= self.randomization_factor <= 1:
            problems.append(f"randomization_factor: must be between 0 and 1, got {self.randomization_factor}")
        return problems


@dataclass
class ExporterConfig:
    # Empty endpoint: write OTLP JSON lines to `file_path` instead of sending.
    endpoint: str = ""
    protocol: Literal["grpc", "http/protobuf"] = "grpc"
    headers: dict[str, str] = field(default_factory=dict)
    compression: Literal["gzip", "none"] = "gzip"
    timeout: Duration = Duration(10.0)
    tls: TlsConfig = field(default_factory=TlsConfig)
    file_path: str = "./otelsignals-data/enriched.jsonl"
    batch: BatchConfig = field(default_factory=BatchConfig)
    queue: QueueConfig = field(default_factory=QueueConfig)
    retry: RetryConfig = field(default_factory=RetryConfig)

    def validate(self) -> list[str]:
        problems = []
        if self.endpoint and self.protocol == "http/protobuf" and not re.match(r"^https?://", self.endpoint):
            problems.append(
                "endpoint: an http/protobuf endpoint must start with http:// or https://, "
                f"got {self.endpoint!r}"
            )
        if self.endpoint and self.protocol == "grpc":
            # host:port, optionally behind http:// or https:// as OTEL_EXPORTER_OTLP_ENDPOINT allows.
            problems += _host_port_problems("endpoint", grpc_address(self.endpoint))
        problems += in_section("tls", self._tls_problems())
        if not self.endpoint and not PurePath(self.file_path).name:
            problems.append(
                f"file_path: a file to write to is needed when no endpoint is set, got {self.file_path!r}"
            )
        problems += _header_problems(self.headers, grpc=self.protocol == "grpc")
        problems += in_section("batch", self.batch.validate())
        problems += in_section("queue", self.queue.validate())
        problems += in_section("retry", self.retry.validate())
        return problems

    def _tls_problems(self) -> list[str]:
        """What stops ``tls`` from being used as written: before, a plain-text gRPC exporter given
        certificate files sent in plain text, and a file that could not be read stopped the process
        with an error naming no key."""
        tls = self.tls
        files = {"ca_file": tls.ca_file, "cert_file": tls.cert_file, "key_file": tls.key_file}
        given = [key for key, path in files.items() if path]
        if not self.endpoint:
            return []  # the file exporter: nothing is sent
        grpc = self.protocol == "grpc"
        secure = self.endpoint.startswith("https://") or (grpc and not tls.insecure)
        if given and not secure:
            how = "set insecure: false (or an https:// endpoint)" if grpc else "use an https:// endpoint"
            unused = ", ".join(given)
            return [f"{given[0]}: {unused} would not be used, the endpoint is sent to in plain text; {how}"]
        problems = []
        if grpc and tls.insecure_skip_verify:
            problems.append("insecure_skip_verify: applies to OTLP/HTTP only (gRPC always verifies)")
        if (tls.key_file and not tls.cert_file) or (grpc and tls.cert_file and not tls.key_file):
            # (OTLP/HTTP takes a cert_file holding the key too)
            problems.append("cert_file and key_file: a client certificate needs both")
        if problems or not secure:
            return problems
        return client_ssl_context(tls)[1]


def client_ssl_context(tls: TlsConfig) -> tuple[ssl.SSLContext, list[str]]:
    """The exporter's TLS context as ``tls`` describes it, and what stops its files from being used,
    naming the key: one code path for ``validate`` (which checks the gRPC exporter's files with it
    too, though pyqwest reads them) and the OTLP/HTTP sender."""
    problems = []
    try:  # ca_file replaces the system's CAs, as in the Collector
        context = ssl.create_default_context(cafile=tls.ca_file or None)
    except (OSError, ssl.SSLError) as exc:
        problems.append(f"ca_file: {tls.ca_file!r} cannot be used: {exc}")
        context = ssl.create_default_context()
    try:
        if tls.cert_file:
            context.load_cert_chain(tls.cert_file, tls.key_file or None, password=no_passphrase)
    except EncryptedKeyError:
        problems.append(
            f"key_file: {tls.key_file or tls.cert_file} is encrypted: a key without passphrase is needed"
        )
    except (OSError, ssl.SSLError) as exc:
        problems.append(f"cert_file and key_file: {tls.cert_file!r} / {tls.key_file!r} cannot be used: {exc}")
    if tls.insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context, problems


class EncryptedKeyError(Exception):
    """A private key that needs a passphrase (no_passphrase was asked for one)."""


def no_passphrase() -> bytes:
    """The password callback of ``load_cert_chain`` wherever a key is loaded (receivers, exporter):
    OpenSSL would otherwise ask for the passphrase on the terminal."""
    raise EncryptedKeyError


# An HTTP field name (RFC 9110 token characters); a gRPC metadata key, once lower-cased, is narrower.
# A value may not hold control characters. The transport writes some headers itself.
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_GRPC_METADATA_KEY = re.compile(r"[0-9a-z_.\-]+")
_HEADER_VALUE_FORBIDDEN = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_TRANSPORT_HEADERS = frozenset(
    ("content-type", "content-length", "content-encoding", "transfer-encoding", "te", "connection", "host")
)


def grpc_address(endpoint: str) -> str:
    """An OTLP/gRPC endpoint's host:port, without the scheme OTEL_EXPORTER_OTLP_ENDPOINT may put first."""
    return re.sub(r"^(grpc|https?)://", "", endpoint).rstrip("/")


def _header_problems(headers: dict[str, str], grpc: bool) -> list[str]:
    return [
        f"headers: {name!r}: {problem}"
        for name, value in headers.items()
        if (problem := _header_problem(name, value, grpc))
    ]


def _header_problem(name: str, value: str, grpc: bool) -> str:
    """Why ``name: value`` cannot be sent as an export header ("" when it can): caught at start-up
    rather than failing every export (a token read from a file often ends in a newline)."""
    lowered = name.lower()
    if not _HEADER_NAME.fullmatch(name):
        return "not a valid header name (letters, digits and !#$%&'*+-.^_`|~ only)"
    if grpc and not _GRPC_METADATA_KEY.fullmatch(lowered):
        return "not a valid gRPC metadata key (letters, digits and _.- only)"
    if lowered in _TRANSPORT_HEADERS or lowered.startswith("grpc-") or lowered.startswith(":"):
        return "the transport writes this header itself"
    if _HEADER_VALUE_FORBIDDEN.search(value):
        return "the value holds a control character (a line break at the end of a token file?)"
    return ""


@dataclass
class SessionsConfig:
    # A conversation's state is forgotten this long after its last trace.
    ttl: Duration = Duration(1800.0)
    # At most this many conversations are kept; beyond, the least recently active are evicted.
    max_sessions: int = 50_000
    # And at most about this much memory of conversation state (estimated from the text and the
    # messages kept: pipeline/sessions.py); beyond, the least recently active goes cold, or is
    # evicted if it is cold already. 0 = off.
    max_bytes: ByteSize = ByteSize(128 * 1024**2)
    # Per conversation, only the latest messages are kept (older ones are counted as trimmed).
    max_messages: int = 2000
    # A conversation with no trace for this long goes cold: it drops what its next trace rebuilds
    # from its messages (the history cache, the detectors' prepared texts), about a quarter of a
    # short conversation's state, and that trace takes longer. The results are the same (but for a
    # conversation trimmed to max_messages: README, "Cold conversations"). 0 = never.
    cold_after: Duration = Duration(300.0)
    # The attributes that name a conversation, the first one set on any span of a trace winning
    # (SPEC §2's order by default). An app whose framework writes a conversation id per run
    # (Pydantic AI without a conversation_id given) and names its session itself puts session.id first.
    key_attributes: tuple[str, ...] = CONVERSATION_KEY_ATTRIBUTES

    def validate(self) -> list[str]:
        problems = []
        if self.max_messages < 10:
            problems.append(f"max_messages: must be at least 10, got {self.max_messages}")
        if not self.key_attributes:
            problems.append(
                "key_attributes: name at least one attribute (without, every trace is a conversation)"
            )
        for name in self.key_attributes:
            # Read from the span's bytes by a marker whose length is one varint byte (span_decoder).
            if not name.strip() or len(name.encode()) > 127:
                problems.append(f"key_attributes: {name!r} is not an attribute name of 1 to 127 bytes")
        return problems


@dataclass
class AnalyzerConfig:
    # How much of one span's text the detectors read (otelsignals/limits.py): past these, text is
    # cut for the analysis only (counted by reason); the span is forwarded untouched.
    max_message_bytes: ByteSize = ByteSize(64 * 1024)
    max_messages_per_span: int = 2000
    max_span_text_bytes: ByteSize = ByteSize(1024**2)
    # Traces accepted and not yet analysed (the analysis runs on its own thread): past this many
    # bytes the receivers answer UNAVAILABLE / 503 with Retry-After until the analysis catches up.
    queue_max_bytes: ByteSize = ByteSize(64 * 1024**2)
    # Python's GIL switch interval while the analysis thread is behind (a trace waited for it over
    # 20 ms), the one it replaced (Python's 5 ms) again once the queue is empty. The analysis
    # computes without letting go of the GIL; the event loop lets go at every socket call and then
    # waits up to the interval to take it back, so at 5 ms a backlog kept health checks, /metrics
    # and OTLP answers waiting for seconds (bench/backlog_latency.py). Only while behind, not for
    # the process's life: a shorter interval costs CPU whenever both threads run (bench/RESULTS.md).
    backlog_switch_interval: Duration = Duration(0.001)

    def validate(self) -> list[str]:
        problems = [
            f"{key}: must be at least {minimum}, got {getattr(self, key)}"
            for key, minimum in (
                ("max_message_bytes", 1024),
                ("max_messages_per_span", 1),
                ("max_span_text_bytes", 1024),
                ("queue_max_bytes", 1024**2),
            )
            if int(getattr(self, key)) < minimum
        ]
        interval = self.backlog_switch_interval
        if not 0 < interval <= 0.1:
            problems.append(
                f"backlog_switch_interval: must be more than 0 and at most 100ms, got {interval * 1000:g}ms"
            )
        return problems


@dataclass
class SignalsConfig:
    # Write signal.snippet (the user's matched words) on span events; off for PII-sensitive data.
    snippets: bool = True
    # Also write the reference implementation's legacy signals.* keys (follow_up, frustration, ...).
    legacy_attributes: bool = True
    # Append " 🚩" to a flagged span's name. False for RED metrics keyed on span names (a renamed span
    # would count as another operation); the flag is still written as signals.flagged.
    flag_span_name: bool = True
    # Efficiency is 1.0 up to this many user turns (SPEC §4).
    baseline_user_turns: int = 5
    # Leaf types or whole categories never detected (the reference's overrides.disable_signals), e.g.
    # [interaction.satisfaction.gratitude, execution.loops].
    disable: tuple[str, ...] = ()

    def validate(self) -> list[str]:
        problems = []
        if self.baseline_user_turns < 1:
            problems.append(f"baseline_user_turns: must be at least 1, got {self.baseline_user_turns}")
        for name in self.disable:
            if name not in LEAF_TYPES and name not in CATEGORIES:
                problems.append(f"disable: {name!r} is neither a leaf type nor a category of the taxonomy")
        return problems


# Every metric a threshold can be set for: session, trace and judge metrics.
METRIC_NAMES = (
    "agent_reliability",
    "agent_consistency",
    "coherence",
    "loop_detection",
    "confidence",
    "tool_correctness",
    "task_completion",
    "argument_correctness",
    "step_efficiency",
    "plan_adherence",
    "plan_quality",
)


@dataclass
class EvalsConfig:
    # Per-trace signals for the session metrics (SPEC §6): coherence and loop detection with the
    # offline embedding model (16–92 MiB once loaded), confidence and tool correctness by proxy.
    trace_metrics: bool = True
    # Where the shipped model's weighted vector table and vocabulary are cached, the table to be
    # mapped from a file rather than held in memory (76 MiB), the vocabulary to be read without its
    # Parquet file; empty: $XDG_CACHE_HOME/otelsignals or ~/.cache/otelsignals.
    model_cache_dir: str = ""
    # An OpenAI-compatible /v1/embeddings endpoint to use instead of the shipped model.
    embeddings_url: str = ""
    embeddings_model: str = ""
    # A metric passes (success) at or above this score...
    threshold: float = 0.5
    # ...or at or above its own, e.g. {agent_reliability: 0.7, coherence: 0.4} (any metric name).
    thresholds: dict[str, float] = field(default_factory=dict)
    # An OpenAI-compatible chat endpoint for the LLM-judge metrics of eval runs (off when empty).
    judge_url: str = ""
    judge_model: str = ""
    judge_api_key: str = ""
    # Also judge every analysed trace's confidence and tool correctness (one or two LLM calls per
    # trace, in the background) instead of using the proxies. Off: it costs money per trace.
    judge_traces: bool = False
    # Eval-run documents kept in the store (every backend): each time a run is written, runs last
    # written longer ago than runs_max_age, then the oldest beyond runs_max_count, are removed.
    runs_max_age: Duration = Duration(7 * 86400.0)
    runs_max_count: int = 1000

    def threshold_for(self, metric: str) -> float:
        return self.thresholds.get(metric, self.threshold)

    def validate(self) -> list[str]:
        problems = []
        for metric, value in {"threshold": self.threshold, **self.thresholds}.items():
            if not 0.0 <= value <= 1.0:
                key = metric if metric == "threshold" else f"thresholds.{metric}"
                problems.append(f"{key}: must be from 0 to 1, got {value}")
        unknown = sorted(set(self.thresholds) - set(METRIC_NAMES))
        if unknown:
            problems.append(f"thresholds: unknown metrics {unknown}; known: {', '.join(METRIC_NAMES)}")
        if self.runs_max_age <= 0:
            problems.append(f"runs_max_age: must be greater than 0, got {self.runs_max_age:g}s")
        if self.runs_max_count < 1:
            problems.append(f"runs_max_count: must be at least 1, got {self.runs_max_count}")
        if self.judge_traces and self.judge_url and not self.judge_model:
            problems.append("judge_model: the model to ask judge_url for is needed when judge_traces is on")
        return problems


@dataclass
class SamplerConfig:
    enabled: bool = False
    # Always kept, whatever the budgets (quality buckets).
    keep_qualities: tuple[str, ...] = ("severe", "poor")
    # Keep turns whose conversation's triage priority (0–100) is at least this, within
    # budget_per_minute (above 100: off).
    keep_priority: float = 50.0
    # Added to the keep probability of the random draw: priority_weight × priority ÷ 100.
    priority_weight: float = 0.5
    # Keep flagged turns (🚩) ahead of the random draw, within budget_per_minute.
    keep_flagged: bool = True
    # Exemplars (not flagged; excellent, or satisfied and efficient) kept up to these rates.
    exemplars_per_minute: float = 60.0
    exemplars_per_agent_per_minute: float = 10.0
    # Keep probability of the uninformative middle.
    baseline_rate: float = 0.05
    # Category → added to the keep probability when the conversation has shown that category.
    category_weights: dict[str, float] = field(
        default_factory=lambda: {
            "execution.failure": 1.0,
            "interaction.disengagement": 1.0,
            "execution.loops": 0.5,
            "environment.exhaustion": 0.5,
            "interaction.misalignment": 0.3,
            "interaction.stagnation": 0.3,
        }
    )
    # Traces kept per minute outside the always-keep rules (severe, poor, session), per replica.
    budget_per_minute: float = 600.0
    # Traces with no analysed conversation (plain HTTP, batch jobs...): forwarded by default.
    non_conversation_traces: Literal["keep", "drop"] = "keep"
    # Sessions whose keep state is remembered (least recently seen forgotten beyond).
    max_sessions: int = 100_000
    # Agents with their own exemplar bucket (least recently seen forgotten beyond).
    max_agents: int = 10_000

    def keep_quality_names(self) -> tuple[str, ...]:
        """``keep_qualities``; a program may also give it as one comma-separated string."""
        value: tuple[str, ...] | list[str] | str = self.keep_qualities
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return tuple(str(part) for part in value)

    def validate(self) -> list[str]:
        # Values are converted with float()/int() as the sampler will: a program (not the loader)
        # may hand them over as strings.
        problems = []
        qualities = [name for name, _ in BUCKETS]
        for quality in self.keep_quality_names():
            if quality not in qualities:
                problems.append(f"keep_qualities: unknown quality {quality!r}; one of {', '.join(qualities)}")
        if not 0.0 <= float(self.baseline_rate) <= 1.0:  # NaN too
            problems.append(f"baseline_rate: must be between 0 and 1, got {self.baseline_rate}")
        for key in ("exemplars_per_minute", "exemplars_per_agent_per_minute", "budget_per_minute"):
            if float(getattr(self, key)) < 0:
                problems.append(f"{key}: must not be negative, got {getattr(self, key)}")
        for category, weight in self.category_weights.items():
            key = f"category_weights.{category}"
            if category not in CATEGORIES:
                problems.append(f"{key}: unknown category; one of {', '.join(CATEGORIES)}")
                continue
            try:
                value = float(weight)
            except (TypeError, ValueError):
                problems.append(f"{key}: expected a number, got {weight!r}")
                continue
            if not value >= 0.0:  # NaN too
                problems.append(f"{key}: must not be negative, got {weight}")
        if not float(self.keep_priority) >= 0.0:  # NaN too; above 100 turns the rule off
            problems.append(f"keep_priority: must not be negative, got {self.keep_priority}")
        if not 0.0 <= float(self.priority_weight) <= 1.0:
            problems.append(f"priority_weight: must be between 0 and 1, got {self.priority_weight}")
        if self.non_conversation_traces not in ("keep", "drop"):
            problems.append(
                f"non_conversation_traces: must be keep or drop, got {self.non_conversation_traces!r}"
            )
        for key in ("max_sessions", "max_agents"):
            if int(getattr(self, key)) < 1:
                problems.append(f"{key}: must be at least 1, got {getattr(self, key)}")
        return problems


@dataclass
class AdminConfig:
    enabled: bool = True
    endpoint: str = "127.0.0.1:13317"
    # When set, /v1/* requires "Authorization: Bearer <token>" (health and metrics stay open).
    auth_token: str = ""
    # /v1/* serves conversations (message text when signals.snippets is on) and agent data: on an
    # address other than loopback it needs auth_token, unless this says otherwise on purpose.
    allow_unauthenticated: bool = False
    # Open connections; beyond, new ones get 503 and are closed. Idle connections and slow headers
    # are closed after receiver.idle_timeout and receiver.header_timeout.
    max_connections: int = 256

    def validate(self) -> list[str]:
        problems = _host_port_problems("endpoint", self.endpoint)
        if not problems and self.enabled and not self.auth_token and not self.allow_unauthenticated:
            host, _ = split_host_port(self.endpoint, "endpoint")
            if not is_loopback(host):
                problems.append(
                    f"auth_token: the admin API would serve conversations on {self.endpoint} (not loopback) "
                    "to anyone: set admin.auth_token (e.g. from a Secret), or admin.allow_unauthenticated: "
                    "true on purpose"
                )
        if self.max_connections < 1:
            problems.append(f"max_connections: must be at least 1, got {self.max_connections}")
        return problems


@dataclass
class StoreConfig:
    directory: str = "./otelsignals-data"
    # Where reputation windows live: empty = an SQLite file in `directory`; or sqlite:///path,
    # redis://host:6379/0, postgresql://user@host/db when several replicas share one window.
    url: str = ""

    def validate(self) -> list[str]:
        scheme = self.url.split(":", 1)[0].lower()
        if self.url and scheme not in ("sqlite", "redis", "rediss", "unix", "postgresql", "postgres"):
            return [f"url: must be sqlite:///…, redis://… or postgresql://…, got {self.url!r}"]
        return []


@dataclass
class IndexConfig:
    """The conversation index (stores/conversation_index.py): every analysed conversation, findable
    after its session closed (GET /v1/sessions)."""

    enabled: bool = True
    # Empty = an SQLite file (index.db) in store.directory; or sqlite:///path, postgresql://… when
    # several replicas share one index.
    url: str = ""
    # Keep the messages' text (off: counts, signals without snippets, metrics, trace ids only).
    # signals.snippets off withholds it too. Text kept is masked by redact_patterns first.
    content: bool = False
    # Regular expressions whose matches are replaced by [redacted] in kept text (emails, and runs of
    # 9+ digits — phone and card numbers — by default).
    redact_patterns: tuple[str, ...] = (
        # Bounded, and anchored so that a long run of word characters is scanned once, not once
        # per start position (linear time on a 64 KiB blob).
        r"(?<![\w.+-])[\w.+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63}){1,8}",
        r"\+?\d(?:[ ().-]{0,2}\d){8,}",  # 9+ digits: phone and card numbers, not dates or amounts
    )
    # Conversations not seen for this long are removed, then the least recently seen past max_bytes.
    max_age: Duration = Duration(30 * 86400.0)
    max_bytes: ByteSize = ByteSize(1024**3)
    # Changes are written in batches this often (latest state per conversation wins).
    flush_interval: Duration = Duration(1.0)
    # Conversations waiting for the next write; beyond, the oldest change is dropped and counted.
    max_pending: int = 10_000

    def validate(self) -> list[str]:
        problems = []
        for pattern in self.redact_patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                problems.append(f"redact_patterns: {pattern!r} is not a regular expression: {exc}")
        if self.flush_interval <= 0:
            problems.append(f"flush_interval: must be greater than 0, got {self.flush_interval}s")
        if self.max_pending < 1:
            problems.append(f"max_pending: must be at least 1, got {self.max_pending}")
        scheme = self.url.split(":", 1)[0].lower()
        if self.url and scheme not in ("sqlite", "postgresql", "postgres"):
            problems.append(f"url: must be sqlite:///… or postgresql://…, got {self.url!r}")
        return problems


@dataclass
class UiConfig:
    """The triage page the admin API serves at /ui."""

    enabled: bool = True
    # A link from a conversation to its trace in your trace backend, {trace_id} replaced by the
    # trace's hex id, e.g. http://grafana:3000/explore?…{trace_id}… or http://phoenix:6006/…
    # Empty: no links.
    trace_url: str = ""

    def validate(self) -> list[str]:
        if self.trace_url and "{trace_id}" not in self.trace_url:
            return [f"trace_url: must contain {{trace_id}}, got {self.trace_url!r}"]
        return []


@dataclass
class AnnotationsConfig:
    """Conversation verdicts written into a trace backend as annotations (pipeline/annotations.py)."""

    # Arize Phoenix's base URL (e.g. http://phoenix:6006): each analysed turn's verdict is posted to
    # its REST API as a span annotation on the turn's model-call span. Empty: off.
    phoenix_url: str = ""
    # Sent with every request, e.g. {authorization: "Bearer <API key>"} when Phoenix has auth on.
    headers: dict[str, str] = field(default_factory=dict)
    # The annotation's name in Phoenix ("note" is reserved there).
    name: str = "otelsignals"
    # Verdicts waiting to be sent; beyond, new ones are dropped and counted (the pipeline never waits).
    max_pending: int = 10_000
    # Verdicts per request at most; a request waits up to flush_interval for a batch to fill.
    batch_size: int = 100
    flush_interval: Duration = Duration(1.0)
    # Per request; a refused request is tried up to max_attempts times with backoff.
    timeout: Duration = Duration(10.0)
    max_attempts: int = 5

    def validate(self) -> list[str]:
        problems = []
        if self.phoenix_url and not re.match(r"^https?://[^/]", self.phoenix_url):
            problems.append(f"phoenix_url: must start with http:// or https://, got {self.phoenix_url!r}")
        if not self.name.strip() or self.name == "note":
            problems.append(f"name: must be set and not 'note' (Phoenix reserves it), got {self.name!r}")
        problems += _header_problems(self.headers, grpc=False)
        for key in ("max_pending", "batch_size", "max_attempts"):
            if getattr(self, key) < 1:
                problems.append(f"{key}: must be at least 1, got {getattr(self, key)}")
        for key in ("flush_interval", "timeout"):
            if getattr(self, key) <= 0:
                problems.append(f"{key}: must be greater than 0, got {getattr(self, key):g}s")
        return problems


@dataclass
class LogConfig:
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["text", "json"] = "text"
    # A problem that repeats (bad input, a downstream or store that is down) is logged when it
    # starts and when it is over; in between, one line at most this often gives its count.
    summary_interval: Duration = Duration(300.0)

    def validate(self) -> list[str]:
        if self.summary_interval <= 0:
            return [f"summary_interval: must be greater than 0, got {self.summary_interval:g}s"]
        return []


@dataclass
class ServiceConfig:
    shutdown_timeout: Duration = Duration(10.0)
    # Long-lived objects are moved out of the garbage collector's reach this often (gc_policy.py),
    # so no collection pause grows with the open conversations; 0 = Python's default collector.
    gc_freeze_interval: Duration = Duration(1.0)


@dataclass
class Config:
    receiver: ReceiverConfig = field(default_factory=ReceiverConfig)
    assembler: AssemblerConfig = field(default_factory=AssemblerConfig)
    exporter: ExporterConfig = field(default_factory=ExporterConfig)
    sessions: SessionsConfig = field(default_factory=SessionsConfig)
    analyzer: AnalyzerConfig = field(default_factory=AnalyzerConfig)
    signals: SignalsConfig = field(default_factory=SignalsConfig)
    admin: AdminConfig = field(default_factory=AdminConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    reputation: ReputationConfig = field(default_factory=ReputationConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    ui: UiConfig = field(default_factory=UiConfig)
    annotations: AnnotationsConfig = field(default_factory=AnnotationsConfig)
    evals: EvalsConfig = field(default_factory=EvalsConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    log: LogConfig = field(default_factory=LogConfig)
    service: ServiceConfig = field(default_factory=ServiceConfig)

    def validate(self) -> list[str]:
        """Every section's problems, keys dotted from the top."""
        problems = []
        for section in dataclasses.fields(self):
            value = getattr(self, section.name)
            if isinstance(value, ConfigSection):
                problems += in_section(section.name, value.validate())
        return problems


def is_loopback(host: str) -> bool:
    """Whether ``host`` is only reachable from this machine (a name other than localhost is not)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def validate(config: Config) -> Config:
    """``config`` if every section accepts it, else one :class:`ConfigError` listing every problem."""
    problems = config.validate()
    if problems:
        raise ConfigError.from_problems(problems)
    return config


def split_host_port(endpoint: str, key: str) -> tuple[str, int]:
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(key, f"expected host:port, got {endpoint!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _host_port_problems(key: str, endpoint: str) -> list[str]:
    try:
        split_host_port(endpoint, key)
    except ConfigError as exc:
        return [f"{key}: {exc.problem}"]
    return []
