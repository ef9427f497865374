"""README.md documents what exists: every command-line option, every Prometheus metric the sidecar
registers, every configuration key, every attribute otelsignals writes on spans, every key of the
JSON lines `otelsignals analyze` prints.

The lists come from the program itself (the argparse parsers, a built sidecar's registry, the config
dataclasses, the enricher and the session span), so anything added later fails here until the README
mentions it. The README's shorthands count, written out as a reader would:

- after a metric, `_suffix` names a sibling of the same component: in "`otelsignals_index_writes_total`,
  `_write_errors_total`" the second is `otelsignals_index_write_errors_total`;
- after an attribute, `.suffix` replaces its last part: in "`signals.x.count` and `.severity`", or
  "`signals.x.count/.severity`", the second is `signals.x.severity`;
- `<layer>.<category>` stands for every category of the taxonomy (`signals.<layer>.<category>.count`);
- in a table row whose first cell names configuration sections (`` `exporter.retry` ``), the bare
  names in the other cells are keys of those sections.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otelsignals.analysis import Analysis
from otelsignals.cli import _parser, main
from otelsignals.config import Config
from otelsignals.evals.session_metrics import agent_consistency, agent_reliability
from otelsignals.model import Conversation
from otelsignals.offline import analyze_files
from otelsignals.pipeline.enricher import span_attributes
from otelsignals.pipeline.sampler import REASON_ATTRIBUTE, SAMPLED_ATTRIBUTE
from otelsignals.pipeline.session_span import session_span
from otelsignals.reputation import Evaluation, reputation
from otelsignals.scoring import score
from otelsignals.sidecar import Sidecar
from otelsignals.signals.taxonomy import CATEGORIES, LEAF_TYPES
from tests.test_enrichment_e2e import documented_example

README = Path(__file__).resolve().parent.parent / "README.md"


def code_spans(text: str) -> list[str]:
    """The README's inline code, in order (fenced blocks aside); a span wrapped over two lines is
    joined again."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return [re.sub(r"\s+", "", span) for span in re.findall(r"`([^`]+)`", prose)]


def written_out(spans: list[str]) -> set[str]:
    """Every name the code spans hold, shorthands written out, labels (`{reason}`) dropped."""
    names: set[str] = set()
    metric_component = ""  # "otelsignals_index" after `otelsignals_index_writes_total`
    attribute = ""  # the last attribute written out, for a following `.suffix`
    for span in spans:
        for part in span.split("/"):
            part = re.sub(r"\{[^}]*\}", "", part)
            if part.startswith("otelsignals_"):
                metric_component = "_".join(part.split("_")[:2])
            elif part.startswith("_") and metric_component:
                part = metric_component + part
            elif part.startswith(".") and attribute:
                part = attribute.rsplit(".", 1)[0] + part
            if part.startswith("signals."):
                attribute = part
            names.add(part)
    return names


@pytest.fixture(scope="module")
def readme() -> str:
    return README.read_text()


@pytest.fixture(scope="module")
def names(readme: str) -> set[str]:
    return written_out(code_spans(readme))


def mentioned(text: str, word: str) -> bool:
    return re.search(rf"(?<![\w.-]){re.escape(word)}(?![\w-])", text) is not None


# --------------------------------------------------------------------------- command-line options


def commands() -> dict[str, argparse.ArgumentParser]:
    (subparsers,) = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(subparsers.choices)


def test_every_command_and_option_is_documented(readme: str):
    undocumented = []
    for name, parser in commands().items():
        if not mentioned(readme, f"otelsignals {name}"):
            undocumented.append(f"otelsignals {name}")
        for action in parser._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help" and not mentioned(readme, option):
                    undocumented.append(f"otelsignals {name} {option}")
            for choice in action.choices or ():
                if not mentioned(readme, str(choice)):
                    undocumented.append(f"otelsignals {name} {action.option_strings[0]} {choice}")
    assert not undocumented, f"not in README.md: {undocumented}"


# --------------------------------------------------------------------------- metrics


def registered_metrics(tmp_path: Path) -> set[str]:
    """The metric families of a sidecar built with every optional stage on (not started: building
    it registers every metric)."""
    config = Config()
    config.sampler.enabled = True
    config.store.directory = str(tmp_path / "store")
    config.exporter.file_path = str(tmp_path / "enriched.jsonl")
    return {family.name for family in Sidecar(config).telemetry.registry.collect()}


def test_every_metric_is_documented(tmp_path, names: set[str]):
    metrics = registered_metrics(tmp_path)
    assert len(metrics) > 40 and "otelsignals_sampler_sessions" in metrics, "the registry was read"
    undocumented = sorted(m for m in metrics if m not in names and f"{m}_total" not in names)
    assert not undocumented, f"not in README.md: {undocumented}"


# --------------------------------------------------------------------------- configuration keys


def config_keys(section: Any, prefix: str = "") -> list[str]:
    keys = []
    for field in dataclasses.fields(section):
        value = getattr(section, field.name)
        if dataclasses.is_dataclass(value):
            keys += config_keys(value, f"{prefix}{field.name}.")
        else:
            keys.append(f"{prefix}{field.name}")
    return keys


def keys_in_section_tables(readme: str, sections: set[str]) -> set[str]:
    """``section.key`` for each bare name in a table row whose first cell names sections."""
    found = set()
    for row in re.findall(r"^\|(.*)\|\s*$", readme, re.MULTILINE):
        first, *others = row.split("|")
        named = [s for s in code_spans(first) if s in sections]
        if not named:
            continue
        for key in code_spans("|".join(others)):
            found.update(f"{section}.{key}" for section in named)
    return found


def test_every_configuration_key_is_documented(readme: str):
    config = Config()
    keys = config_keys(config)
    sections = {key.rsplit(".", 1)[0] for key in keys if "." in key}
    in_tables = keys_in_section_tables(readme, sections)
    undocumented = [k for k in keys if k not in in_tables and not mentioned(readme, k)]
    assert not undocumented, f"not in README.md: {undocumented}"


# --------------------------------------------------------------------------- span attributes


def as_documented(attribute: str) -> str:
    """``signals.interaction.misalignment.count`` as the README writes every category's."""
    for category in CATEGORIES:
        if attribute.startswith(f"signals.{category}."):
            return attribute.replace(category, "<layer>.<category>", 1)
    return attribute


def enricher_attributes(tmp_path: Path) -> set[str]:
    """What the enricher can write: every category counted, skipped detectors, a scored reputation,
    the sampler's marks; and, from a real offline analysis, the signal events' attributes."""
    everything = {leaf: 1 for leaf in LEAF_TYPES}
    analysis = Analysis("sess-1", b"\x01" * 16, b"\x02" * 8, None, score(Conversation("sess-1"), everything))
    analysis.skipped = ["content"]
    evaluations = [Evaluation("agent", True, 500.0, float(i)) for i in range(60)]
    attributes = set(span_attributes(analysis, legacy=True, reputation=reputation(evaluations, 60)))
    assert {"signals.reputation.score", "signals.skipped", "signals.interaction.handoff.count"} <= attributes
    attributes |= {SAMPLED_ATTRIBUTE, REASON_ATTRIBUTE}
    path = tmp_path / "example.binpb"
    path.write_bytes(encode_spans(documented_example()).SerializeToString())
    for result in analyze_files([path], Config()):
        for record in result.trace.spans:
            span = Span.FromString(record.data)
            attributes |= {kv.key for kv in span.attributes if kv.key.startswith("signals.")}
            attributes |= {kv.key for event in span.events for kv in event.attributes}
    assert "signal.snippet" in attributes, "the offline analysis enriched the example"
    return attributes


def session_span_attributes() -> set[str]:
    metrics = [agent_reliability([], threshold=0.5), agent_consistency([], threshold=0.5)]
    record = session_span("sess-1", "agent", [(b"\x01" * 16, b"\x02" * 8)], metrics, "ttl", 1, 2)
    return {kv.key for kv in Span.FromString(record.data).attributes}


def test_every_span_attribute_otelsignals_writes_is_documented(tmp_path, names: set[str]):
    written = enricher_attributes(tmp_path) | session_span_attributes()
    undocumented = sorted(a for a in written if as_documented(a) not in names)
    assert not undocumented, f"not in README.md: {undocumented}"


# --------------------------------------------------------------------------- analyze --json


def test_every_key_of_the_analyze_json_lines_is_documented(tmp_path, capsys, readme: str):
    path = tmp_path / "example.binpb"
    path.write_bytes(encode_spans(documented_example()).SerializeToString())
    keys = set()
    for extra in ([], ["--rank", "1"]):
        assert main(["analyze", str(path), "--json", *extra]) == 0
        (line,) = [orjson.loads(text) for text in capsys.readouterr().out.splitlines()]
        keys |= set(line) | {key for signal in line.get("signals", []) for key in signal}
    assert {"skipped", "priority_reasons", "terms", "message_index"} <= keys
    undocumented = sorted(key for key in keys if f'"{key}"' not in readme)
    assert not undocumented, f'not in README.md (as "key"): {undocumented}'
