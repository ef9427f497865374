"""The triage page at /ui, in a real browser: Playwright driving Debian's chromium (installed by
scripts/test-deps) against the live sidecar fed with the demo traffic. Screenshots are saved to
test-artifacts/ui/ at the repository root."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from otelsignals.demo.traffic import load_conversations, send_demo_traffic
from tests.support.sidecar import SidecarProcess

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "ui"
TRACE_URL = "http://tempo.example/trace/{trace_id}"
SESSIONS = {c["session_id"] for c in load_conversations() if c.get("session_id")}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/test-deps installs Debian's chromium")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield launched
        launched.close()


def closed_sessions(sidecar: SidecarProcess, token: str = "") -> int:
    request = urllib.request.Request(f"{sidecar.admin_url}/v1/sessions?closed=true&limit=500")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=5) as answer:
        return len(orjson.loads(answer.read())["sessions"])


def fed_sidecar(tmp_path: Path, **extra: Any) -> SidecarProcess:
    return SidecarProcess(
        tmp_path,
        sessions={"ttl": "1s"},
        signals={"snippets": True},
        index={"flush_interval": "100ms", "content": True},
        ui={"trace_url": TRACE_URL},
        **extra,
    )


def wait_for_index(sidecar: SidecarProcess, token: str = "") -> None:
    stats = send_demo_traffic(sidecar.grpc_endpoint, None)
    sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", stats.spans)
    deadline = time.monotonic() + 20
    while closed_sessions(sidecar, token) < len(SESSIONS):
        assert time.monotonic() < deadline, "the demo conversations were not indexed in time"
        time.sleep(0.2)


def shot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000


def test_the_page_ranks_filters_and_opens_conversations(tmp_path: Path, browser: Browser) -> None:
    with fed_sidecar(tmp_path) as sidecar:
        wait_for_index(sidecar)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{sidecar.admin_url}/ui")
        expect(page.locator("body")).to_have_attribute("data-ready", "true", timeout=10_000)

        # The plots: quality bars and one rate line per signal category that fired.
        assert page.locator("#quality-plot rect.bar").count() >= 1
        assert page.locator("#signal-plot polyline.rate").count() >= 1
        assert "severe" in page.locator("#quality-legend").inner_text()

        # Flagged conversations, highest priority first.
        rows = page.locator("#sessions tbody tr")
        assert rows.count() >= 1
        priorities = [float(text) for text in rows.locator("td:first-child").all_inner_texts() if text != "–"]
        assert priorities == sorted(priorities, reverse=True)
        shot(page, "overview")

        # Filters: severe or poor, flagged or not.
        page.select_option("select[name=flagged]", "")
        page.select_option("select[name=quality]", "severe,poor")
        page.click("#filters button")
        expect(page.locator("#list-status")).to_contain_text("shown")
        qualities = page.locator("#sessions tbody tr .q").all_inner_texts()
        assert qualities and set(qualities) <= {"severe", "poor"}
        shot(page, "filtered")

        # One conversation: its messages, the signals highlighted where they fired, metrics, links.
        rows.first.click()
        conversation = page.locator("#conversation")
        expect(conversation).to_be_visible()
        assert page.locator("#messages .message").count() >= 2
        assert page.locator("#messages .message.signalled").count() >= 1
        assert page.locator("#messages mark.signal").count() >= 1
        assert page.locator("#signal-list li").count() >= 1
        assert page.locator("#session-metrics tr").count() >= 2  # agent reliability and consistency
        assert page.locator("#trace-metrics tbody tr").count() >= 1
        link = page.locator("#trace-links a.trace-link").first.get_attribute("href") or ""
        assert re.fullmatch(r"http://tempo\.example/trace/[0-9a-f]{32}", link)
        shot(page, "conversation")


def test_the_page_asks_for_the_token_when_the_api_wants_one(tmp_path: Path, browser: Browser) -> None:
    token = "s3cret-token"
    with fed_sidecar(tmp_path, admin={"auth_token": token}) as sidecar:
        wait_for_index(sidecar, token)
        page = browser.new_page()
        page.goto(f"{sidecar.admin_url}/ui")
        expect(page.locator("#token-form")).to_be_visible()
        assert page.locator("#sessions tbody tr").count() == 0  # nothing shown without the token
        page.fill("#token", token)
        page.click("#token-form button")
        expect(page.locator("body")).to_have_attribute("data-ready", "true", timeout=10_000)
        assert page.locator("#sessions tbody tr").count() >= 1


def test_an_open_conversation_with_snippets_off_says_its_text_is_not_shown(
    tmp_path: Path, browser: Browser
) -> None:
    """With signals.snippets off an open conversation's messages come without text: the page drew
    empty boxes, with no word of why."""
    settings: dict[str, Any] = {"sessions": {"ttl": "10m"}, "index": {"flush_interval": "100ms"}}
    with SidecarProcess(tmp_path, signals={"snippets": False}, **settings) as sidecar:
        stats = send_demo_traffic(sidecar.grpc_endpoint, None)
        sidecar.wait_for_metric("otelsignals_exporter_sent_spans_total", stats.spans)
        sidecar.wait_for_metric("otelsignals_index_writes_total", 1)  # (open ones are indexed too)
        page = browser.new_page()
        page.goto(f"{sidecar.admin_url}/ui")
        expect(page.locator("body")).to_have_attribute("data-ready", "true", timeout=10_000)
        page.select_option("select[name=flagged]", "")
        page.click("#filters button")
        expect(page.locator("#list-status")).to_contain_text("shown")
        page.locator("#sessions tbody tr").first.click()
        expect(page.locator("#messages p.withheld")).to_contain_text("signals.snippets is off")
        assert page.locator("#messages .message").count() >= 2  # the roles and the signals' places stay
