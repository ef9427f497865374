"""The error library's self-test: every example of ``phrases/errors.yaml`` classifies as it says."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otelsignals.model import ToolResult
from otelsignals.signals.errors.classify import Classification, classify_failure, tool_failure
from otelsignals.signals.errors.library import LEAF_OF_GROUP, ErrorLibrary, library
from otelsignals.signals.errors.payload import empty_result_of
from otelsignals.signals.taxonomy import API_ERROR


def _example_result(example: Any, *, failed_by_default: bool) -> tuple[ToolResult, str]:
    if isinstance(example, str):
        if failed_by_default:
            return ToolResult(is_error=True, error_message=example), "tool"
        return ToolResult(is_error=False, content=example), "tool"
    if not isinstance(example, Mapping):
        raise ValueError(f"errors.yaml: an example must be a string or a mapping, not {example!r}")
    result = ToolResult(
        name=example.get("tool"),
        content=example.get("content"),
        is_error=bool(example.get("is_error", failed_by_default)),
        error_type=example.get("error_type"),
        error_message=example.get("error_message"),
        status_code=example.get("status_code"),
    )
    return result, str(example.get("source", "tool"))


def classify_example(example: Any, *, failed_by_default: bool) -> Classification | None:
    """How an errors.yaml example classifies (strings: a failure's message, or a successful result)."""
    result, source = _example_result(example, failed_by_default=failed_by_default)
    if source == "llm_call":
        return classify_failure(
            result.status_code, result.error_type, result.error_message, result.content, source="llm_call"
        )
    return tool_failure(result, tool_name=result.name)


def self_test(lib: ErrorLibrary | None = None) -> list[str]:
    """Problems with errors.yaml: positives that do not classify to their group, near-misses that do.

    A string positive is the message of a failed tool call; a string near-miss is the content of a
    *successful* result and must classify to nothing at all. Mapping examples give the fields
    (``status_code``, ``error_type``, ``error_message``, ``content``, ``is_error``, ``tool``,
    ``source``); a mapping near-miss must not land in its group.
    """
    lib = lib or library()
    problems: list[str] = []
    for group, spec in lib.groups.items():
        leaf = LEAF_OF_GROUP[group]
        positives = spec.get("positives") or []
        near_misses = spec.get("near_misses") or []
        if len(positives) < 8 or len(near_misses) < 8:
            problems.append(f"{group}: needs ≥ 8 positives and ≥ 8 near-misses")
        for example in positives:
            found = classify_example(example, failed_by_default=True)
            expected = leaf
            if (
                isinstance(example, Mapping)
                and example.get("source") == "llm_call"
                and leaf.startswith("execution.")
            ):
                expected = API_ERROR
            if found is None or found.leaf_type != expected:
                problems.append(f"{group}: positive {example!r} → {found.leaf_type if found else None}")
        problems.extend(_near_miss_problems(group, near_misses, "leaf_type", leaf, f"classified as {group}"))
        problems.extend(_reason_problems(group, spec))
    empty = lib.empty_examples
    for example in empty.get("positives") or []:
        if empty_result_of(example) is None:
            problems.append(f"empty_results: positive {example!r} not recognised")
    for example in empty.get("near_misses") or []:
        if empty_result_of(example) is not None:
            problems.append(f"empty_results: near-miss {example!r} taken for an empty result")
    for tool, example in empty.get("tool_positives") or []:
        if empty_result_of(example, tool) is None:
            problems.append(f"empty_results: positive {example!r} of {tool} not recognised")
    for tool, example in empty.get("tool_near_misses") or []:
        if empty_result_of(example, tool) is not None:
            problems.append(f"empty_results: near-miss {example!r} of {tool} taken for an empty result")
    return problems


def _reason_problems(group: str, spec: Mapping[str, Any]) -> list[str]:
    """A reason's positives must classify to ``group`` with that reason; its string near-misses
    (successful results) must fire nothing, its mapping near-misses (failed calls) not get it."""
    problems: list[str] = []
    leaf = LEAF_OF_GROUP[group]
    for reason, reason_spec in (spec.get("reasons") or {}).items():
        positives = reason_spec.get("positives") or []
        near_misses = reason_spec.get("near_misses") or []
        if len(positives) < 3 or len(near_misses) < 3:
            problems.append(f"{group}.{reason}: needs ≥ 3 positives and ≥ 3 near-misses")
        for example in positives:
            found = classify_example(example, failed_by_default=True)
            if found is None or found.leaf_type != leaf or found.reason != reason:
                got = (found.leaf_type, found.reason) if found else None
                problems.append(f"{group}.{reason}: positive {example!r} → {got}")
        problems.extend(
            _near_miss_problems(f"{group}.{reason}", near_misses, "reason", reason, f"got reason {reason}")
        )
    return problems


def _near_miss_problems(
    label: str, near_misses: list[Any], field_name: str, forbidden: str, landed: str
) -> list[str]:
    """A string near-miss (a successful result) must fire nothing; a mapping near-miss (a failed
    call) must not classify with ``field_name`` equal to ``forbidden``."""
    problems = []
    for example in near_misses:
        found = classify_example(example, failed_by_default=False)
        if isinstance(example, str) and found is not None:
            problems.append(f"{label}: near-miss {example!r} fired {found.leaf_type}")
        elif found is not None and getattr(found, field_name) == forbidden:
            problems.append(f"{label}: near-miss {example!r} {landed}")
    return problems
