"""bench/agent_workload.py --set: the sidecar's configuration changed for one measurement."""

from __future__ import annotations

import pytest

from bench.agent_workload import config_overrides, merged


@pytest.mark.parametrize(
    ("settings", "sections"),
    [
        (["evals.trace_metrics=false"], {"evals": {"trace_metrics": False}}),
        (
            ["reputation.enabled=false", "index.enabled=no", "sessions.max_bytes=64MiB"],
            {
                "reputation": {"enabled": False},
                "index": {"enabled": False},
                "sessions": {"max_bytes": "64MiB"},
            },
        ),
        (["exporter.batch.max_spans=100"], {"exporter": {"batch": {"max_spans": 100}}}),
        (
            ["signals.snippets=true", "signals.legacy_attributes=false"],
            {"signals": {"snippets": True, "legacy_attributes": False}},
        ),
    ],
)
def test_settings_become_nested_sections_with_yaml_values(settings, sections):
    assert config_overrides(settings) == sections


@pytest.mark.parametrize("setting", ["evals=false", "trace_metrics", ".enabled=false", "index..enabled=1"])
def test_a_setting_without_section_key_and_value_is_refused(setting):
    with pytest.raises(SystemExit, match=r"SECTION\.KEY=VALUE"):
        config_overrides([setting])


def test_a_change_keeps_the_other_keys_of_its_sections():
    config = {"receiver": {"grpc": {"endpoint": "127.0.0.1:1"}}, "exporter": {"batch": {"timeout": "20ms"}}}
    changed = merged(
        config, config_overrides(["receiver.grpc.max_message_size=1MiB", "exporter.batch.max_spans=9"])
    )
    assert changed == {
        "receiver": {"grpc": {"endpoint": "127.0.0.1:1", "max_message_size": "1MiB"}},
        "exporter": {"batch": {"timeout": "20ms", "max_spans": 9}},
    }
    assert config["receiver"]["grpc"] == {"endpoint": "127.0.0.1:1"}  # the base is left as it was
