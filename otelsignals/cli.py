"""Command line: ``otelsignals run | demo | analyze | export | validate``, and ``--version``."""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from otelsignals.config import Config, ConfigError, ExporterConfig, validate
from otelsignals.config_loading import load_config
from otelsignals.net import AddressInUse
from otelsignals.telemetry import metric_total, setup_logging

if TYPE_CHECKING:
    from otelsignals.analysis import Analysis

logger = logging.getLogger("otelsignals")

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otelsignals",
        description="OpenTelemetry pipeline stage that finds the LLM-agent conversations worth a look.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_package_version()}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help="YAML configuration file (defaults are embedded)")
    common.add_argument("--log-format", choices=["text", "json"], help="log format on stderr")
    common.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", parents=[common], help="run the sidecar (OTLP in, enriched OTLP out)")
    check = commands.add_parser(
        "validate",
        help="check a configuration (the file and the OTELSIGNALS_* environment, as run reads them): "
        "'config OK' or every problem, one per line, exit 2",
    )
    check.add_argument("--config", help="YAML configuration file (without: the embedded defaults)")
    demo = commands.add_parser(
        "demo", parents=[common], help="start the sidecar, send it the bundled demo traffic, summarise"
    )
    demo.add_argument("--repeat", type=int, default=1, help="send the demo conversations N times")
    analyze = commands.add_parser(
        "analyze",
        parents=[common],
        help="analyse OTLP files offline (.binpb/.pb protobuf, .json, .jsonl) and print one result per turn",
    )
    analyze.add_argument("files", nargs="+", type=Path, metavar="FILE")
    analyze.add_argument("--json", action="store_true", help="one JSON object per line")
    analyze.add_argument(
        "--out", type=Path, metavar="ENRICHED.jsonl", help="write the enriched spans (OTLP JSON lines)"
    )
    analyze.add_argument(
        "--rank",
        type=_positive,
        metavar="N",
        help="instead of one line per turn, print the N conversations most worth a look, with why",
    )
    export = commands.add_parser(
        "export",
        parents=[common],
        help="write triaged conversations from the conversation index as a dataset (JSON lines)",
    )
    export.add_argument("--select", required=True, help="flagged, excellent or priority>=X")
    export.add_argument("--format", required=True, choices=["openai-chat", "preference", "hf"], dest="form")
    export.add_argument("--since", help="last seen at or after (Unix seconds or ISO 8601)")
    export.add_argument("--until", help="first seen before (Unix seconds or ISO 8601)")
    export.add_argument(
        "--signal", action="append", default=[], help="only with this leaf or category (repeatable)"
    )
    export.add_argument("--out", type=Path, help="output file (default: stdout)")
    return parser


def _package_version() -> str:
    try:
        return importlib.metadata.version("otelsignals")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {value!r}")
    return number


def main(argv: Sequence[str] | None = None) -> int:
    # gRPC's C core would write a line per failed TLS handshake or bad connection on stderr, unbounded
    # (a port scanner fills the log). What otelsignals sees of a connection it counts and logs once
    # per kind, then a count at most every log.summary_interval; gRPC's handshakes it does not see
    # (README, "TLS and authentication"). Read by grpc when it is first imported.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    args = _parser().parse_args(argv)
    if args.command == "validate":
        return _validate_config(args.config)
    try:
        config = validate(load_config(args.config))
    except ConfigError as exc:
        print(f"otelsignals: {exc}", file=sys.stderr)
        return EXIT_USAGE
    setup_logging(args.log_level or config.log.level, args.log_format or config.log.format)
    try:
        if args.command == "run":
            from otelsignals.sidecar import run_until_signalled

            asyncio.run(run_until_signalled(config))
            return EXIT_OK
        if args.command == "demo":
            return asyncio.run(_demo(config, args.repeat))
        if args.command == "analyze":
            return _analyze(config, args.files, args.json, args.out, args.rank)
        if args.command == "export":
            return _export(config, args)
    except KeyboardInterrupt:
        return EXIT_OK
    except AddressInUse as exc:  # a setting to change, not a failure to debug: one line, no traceback
        print(f"otelsignals: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        logger.error("%s", exc)
        return EXIT_FAILURE
    return EXIT_USAGE


def _validate_config(path: str | None) -> int:
    """What ``run`` would say about the configuration, without starting anything: every problem
    on its own line (stderr), so a broken file is fixed in one pass."""
    try:
        validate(load_config(path))
    except ConfigError as exc:
        for key, problem in exc.problems:
            print(f"{key}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    print("config OK")
    return EXIT_OK


def _export(config: Config, args: argparse.Namespace) -> int:
    import dataclasses

    from otelsignals.dataset_export import ExportError, export, selection
    from otelsignals.pipeline.index_writer import index_url
    from otelsignals.pipeline.listing import parse_time
    from otelsignals.stores.conversation_index import open_index

    try:
        conditions = dataclasses.replace(
            selection(args.select),
            since=parse_time("--since", args.since),
            until=parse_time("--until", args.until),
            signals=tuple(args.signal),
        )
    except ValueError as exc:
        print(f"otelsignals: {exc}", file=sys.stderr)
        return EXIT_USAGE
    index = open_index(index_url(config.index, config.store))
    out = open(args.out, "wb") if args.out else sys.stdout.buffer  # noqa: SIM115 - closed below
    try:
        conversations, lines, skipped = export(index, conditions, args.form, out)
    except ExportError as exc:
        print(f"otelsignals: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        index.close()
        if args.out:
            out.close()
    print(
        f"otelsignals: exported {conversations} conversations as {lines} {args.form} lines"
        + (f"; {skipped} indexed without their text skipped (index.content)" if skipped else ""),
        file=sys.stderr,
    )
    return EXIT_OK


DEMO_OUTPUT = "./otelsignals-data/demo-enriched.jsonl"  # the demo's own file (exporter.file_path)


async def _demo(config: Config, repeat: int) -> int:
    from otelsignals.demo.report import quality_report
    from otelsignals.demo.traffic import send_demo_traffic
    from otelsignals.pipeline.senders import file_output_paths
    from otelsignals.sidecar import Sidecar

    if not config.exporter.endpoint and config.exporter.file_path == ExporterConfig.file_path:
        # The demo's output goes to a file of its own, never the one `otelsignals run` appends to,
        # and holds this run alone, so that it (and `otelsignals analyze` of it) matches the summary
        # printed. A file_path the user chose is appended to like any other.
        config.exporter.file_path = DEMO_OUTPUT
        for path in file_output_paths(config.exporter).values():
            path.unlink(missing_ok=True)
    # Ephemeral loopback ports, so the demo runs beside anything already listening on 4317/4318/13317.
    config.receiver.grpc.endpoint = "127.0.0.1:0"
    config.receiver.http.endpoint = "127.0.0.1:0"
    config.admin.endpoint = "127.0.0.1:0"
    sidecar = Sidecar(config)
    endpoints = await sidecar.start()
    started = time.monotonic()
    try:
        stats = await asyncio.to_thread(
            send_demo_traffic,
            f"127.0.0.1:{endpoints.grpc_port}",
            f"http://127.0.0.1:{endpoints.http_port}/v1/traces",
            repeat=repeat,
        )
    finally:
        await sidecar.stop()
    elapsed = time.monotonic() - started
    registry = sidecar.telemetry.registry
    received = metric_total(registry, "otelsignals_receiver_accepted_spans")
    forwarded = metric_total(registry, "otelsignals_exporter_sent_spans")
    dropped = metric_total(registry, "otelsignals_dropped_spans")
    exporter = config.exporter
    rows = [
        ("conversations sent", stats.conversations),
        ("traces sent", stats.traces),
        ("spans sent (OTel SDK, gRPC + HTTP)", stats.spans),
        ("spans received", int(received)),
        ("  of which GenAI spans", int(metric_total(registry, "otelsignals_analyzer_genai_spans"))),
        ("spans forwarded", int(forwarded)),
        ("spans dropped", int(dropped)),
        ("enriched output", exporter.endpoint or exporter.file_path),
        ("elapsed", f"{elapsed:.1f} s"),
    ]
    width = max(len(name) for name, _ in rows)
    print("otelsignals demo")
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    sessions = sidecar.pipeline.analyzer.sessions
    print("\n".join(quality_report(sessions, config.signals.baseline_user_turns)))
    if not exporter.endpoint:
        print(f"per turn, offline: otelsignals analyze {exporter.file_path}")
    return EXIT_OK if forwarded == stats.spans and not dropped else EXIT_FAILURE


def _analyze(config: Config, files: list[Path], as_json: bool, out: Path | None, rank: int | None) -> int:
    from otelsignals.offline import InputError, analyze_files, encode_trace
    from otelsignals.otlp.json_encode import encode_trace_request

    snippets = config.signals.snippets
    analysed = 0
    latest: dict[str, Analysis] = {}  # conversation → its latest turn, for --rank
    # Written beside ``out`` and put in its place once the input was read whole: a file that cannot
    # be read leaves an earlier output as it was, not emptied.
    partial = out.with_name(f".{out.name}.partial") if out is not None else None
    output = partial.open("wb") if partial is not None else None
    try:
        for result in analyze_files(files, config):
            if output is not None:
                output.write(encode_trace_request(encode_trace(result.trace)) + b"\n")
            if result.analysis is None:
                continue
            analysed += 1
            if rank is not None:
                latest[result.analysis.conversation_id] = result.analysis
                continue
            line = result.analysis.to_json(snippets)
            if as_json:
                sys.stdout.write(orjson.dumps(line).decode() + "\n")
            else:
                types = ", ".join(signal["type"] for signal in line["signals"]) or "-"
                flag = " FLAGGED" if line["flagged"] else ""
                sys.stdout.write(
                    f"{line['conversation_id']}  turns={line['turn_count']}  {line['quality']} "
                    f"{line['quality_score']:.1f}  efficiency={line['efficiency_score']:.2f}{flag}  {types}\n"
                )
    except InputError as exc:
        logger.error("%s", exc)
        if output is not None and partial is not None:
            output.close()
            partial.unlink(missing_ok=True)
        return EXIT_FAILURE
    finally:
        if output is not None:
            output.close()
    if partial is not None and out is not None:
        partial.replace(out)
    if rank is not None:
        _print_ranking(sorted(latest.values(), key=lambda a: -a.priority.value)[:rank], as_json)
    logger.info("analysed %d conversation turns from %d files", analysed, len(files))
    return EXIT_OK


def _print_ranking(ranked: list[Analysis], as_json: bool) -> None:
    """The conversations most worth a look, highest triage priority first, each with its reasons."""
    for place, analysis in enumerate(ranked, start=1):
        score = analysis.score
        if as_json:
            line = {
                "rank": place,
                "conversation_id": analysis.conversation_id,
                "agent_id": analysis.agent_id,
                "priority": analysis.priority.value,
                "reasons": analysis.priority.reasons,
                "terms": analysis.priority.terms,
                "quality": score.quality,
                "quality_score": score.quality_score,
                "turn_count": score.turn_count,
                "trace_id": analysis.trace_id.hex(),
            }
            sys.stdout.write(orjson.dumps(line).decode() + "\n")
            continue
        why = "; ".join(analysis.priority.reasons) or "nothing stands out"
        sys.stdout.write(
            f"{place:3d}. {analysis.priority.value:5.1f}  {analysis.conversation_id}  "
            f"({analysis.agent_id or '-'}, {score.quality}, {score.turn_count} turns)  {why}\n"
        )


if __name__ == "__main__":
    sys.exit(main())
