"""Loading the configuration: the embedded defaults, overlaid by a YAML file, overlaid by
``OTELSIGNALS_<SECTION>__<KEY>`` environment variables, each value converted to its section's type
(durations, sizes, literals, lists, mappings) with a problem naming the key; then every section's
``validate()`` (:func:`otelsignals.config.validate`)."""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml

from otelsignals.config import (
    ENV_PREFIX,
    ByteSize,
    Config,
    ConfigError,
    Duration,
    parse_byte_size,
    parse_duration,
)


def load_config(path: str | Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Defaults, overlaid by the YAML file at ``path`` (if any), overlaid by the environment."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError("--config", f"cannot read {path}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError("--config", f"{path} is not UTF-8 text: {exc.reason}") from exc
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError("--config", f"{path} is not valid YAML: {_yaml_problem(exc)}") from exc
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError("--config", f"{path} must hold a mapping at the top level")
        raw = loaded
    _apply_environment(raw, os.environ if environ is None else environ)
    return _build(Config, raw, "")


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's message spans several lines (it quotes the source); a config error is one line."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    return " ".join(str(exc).split())


class _EnvText(str):
    """An environment value, kept verbatim until the key's type is known: YAML would otherwise
    turn a header or path such as ``007``, ``on``, ``a: b`` or ``key #1`` into something else."""


def _apply_environment(raw: dict[str, Any], environ: Mapping[str, str]) -> None:
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or "__" not in name[len(ENV_PREFIX) :]:
            continue
        path = name[len(ENV_PREFIX) :].lower().split("__")
        node = raw
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[path[-1]] = _EnvText(value)


def _env_value(hint: Any, text: _EnvText) -> Any:
    """String keys take an environment value as it is; other keys read it as YAML, which gives
    "true"/"5"/"[a, b]"/"{k: v}" their natural types."""
    if hint is str or typing.get_origin(hint) is Literal or not text.strip():
        return str(text)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return str(text)


def _build(cls: type, raw: Any, prefix: str) -> Any:
    if not isinstance(raw, dict):
        key = prefix.rstrip(".") or "<root>"
        raise ConfigError(key, f"expected a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    problems = [
        (f"{prefix}{key}", f"unknown key (known: {', '.join(sorted(known))})")
        for key in raw
        if key not in known
    ]
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in raw:
            try:
                values[f.name] = _convert(hints[f.name], raw[f.name], f"{prefix}{f.name}")
            except ConfigError as exc:  # every wrong value of a file is reported in one pass
                problems += exc.problems
    if problems:
        raise ConfigError(*problems[0], *problems[1:])
    return cls(**values)


def _convert(hint: Any, value: Any, key: str) -> Any:
    if isinstance(value, _EnvText):
        value = _env_value(hint, value)
    if dataclasses.is_dataclass(hint):
        # A type hint is a class: is_dataclass() narrows to "instance or class" only.
        return _build(typing.cast(type, hint), value if value is not None else {}, key + ".")
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        raise ConfigError(key, "unsupported union type")  # no such key today; fail loudly if added
    convert = _GENERIC_CONVERTERS.get(origin) if origin is not None else _SCALAR_CONVERTERS.get(hint)
    if convert is None:
        raise ConfigError(key, f"unsupported type {hint}")
    return convert(hint, value, key)


def _to_duration(_: Any, value: Any, key: str) -> Duration:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from exc


def _to_byte_size(_: Any, value: Any, key: str) -> ByteSize:
    try:
        return parse_byte_size(value)
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from exc


def _to_bool(_: Any, value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(key, f"expected true or false, got {value!r}")
    return value


def _to_int(_: Any, value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, f"expected an integer, got {value!r}")
    if value < 0:
        raise ConfigError(key, "must not be negative")
    return value


def _to_float(_: Any, value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise ConfigError(key, f"expected a number, got {value!r}")
    return float(value)


def _to_str(_: Any, value: Any, key: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ConfigError(key, f"expected a string, got {value!r}")
    return str(value)


def _to_literal(hint: Any, value: Any, key: str) -> Any:
    choices = typing.get_args(hint)
    if value not in choices:
        raise ConfigError(key, f"must be one of {', '.join(map(str, choices))}, got {value!r}")
    return value


# Lists whose items may hold commas themselves (regular expressions: \d{9,}): a single string is
# one item, not items split at its commas (which turned a pattern into parts matching nothing).
_ONE_ITEM_PER_STRING = frozenset({"index.redact_patterns"})


def _to_tuple(_: Any, value: Any, key: str) -> tuple[str, ...]:
    if isinstance(value, str) and key in _ONE_ITEM_PER_STRING:
        value = [value] if value.strip() else []
    elif isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, list | tuple):
        raise ConfigError(key, f"expected a list, got {type(value).__name__}")
    return tuple(str(v) for v in value)


def _to_dict(hint: Any, value: Any, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(key, f"expected a mapping, got {type(value).__name__}")
    value_hint = typing.get_args(hint)[1]
    # One key of the map set from the environment (OTELSIGNALS_EVALS__THRESHOLDS__COHERENCE=0.4)
    # arrives as text: read as its value's type, as a whole key's would be.
    value = {k: _env_value(value_hint, v) if isinstance(v, _EnvText) else v for k, v in value.items()}
    if value_hint is float:
        return {str(k): _to_float(float, v, f"{key}.{k}") for k, v in value.items()}
    return {str(k): str(v) for k, v in value.items()}


_Converter = Callable[[Any, Any, str], Any]
# By type hint (Duration and ByteSize before their bases float and int: exact lookups, no isinstance).
_SCALAR_CONVERTERS: dict[Any, _Converter] = {
    Duration: _to_duration,
    ByteSize: _to_byte_size,
    bool: _to_bool,
    int: _to_int,
    float: _to_float,
    str: _to_str,
}
# By the generic hint's origin: Literal["a", "b"], tuple[str, ...], dict[str, float | str].
_GENERIC_CONVERTERS: dict[Any, _Converter] = {Literal: _to_literal, tuple: _to_tuple, dict: _to_dict}
