"""The OTLP/HTTP sender against a real OTLP sink: gzip happens on the sender's own threads, never on
the event loop the receivers answer from (bench/http_export_loop_stall.py: a 4 MiB batch held the
loop for ~100 ms), and the body arrives whole."""

from __future__ import annotations

import asyncio
import gzip
import threading

import pytest

from otelsignals.config import ExporterConfig
from otelsignals.pipeline import senders
from otelsignals.pipeline.senders import HttpSender
from tests.support.clients import encode_spans, make_spans
from tests.support.otlp_sink import OtlpSink

BODY = encode_spans(make_spans(3, 2)).SerializeToString()


@pytest.mark.parametrize("compression", ["gzip", "none"])
def test_a_body_is_compressed_off_the_event_loop_and_arrives_whole(
    compression: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    compressed_on: list[str] = []
    real_compress = gzip.compress

    def compress(data: bytes, level: int = 9) -> bytes:  # the real gzip, noting where it runs
        compressed_on.append(threading.current_thread().name)
        return real_compress(data, level)

    monkeypatch.setattr(senders.gzip, "compress", compress)

    async def send(endpoint: str) -> tuple[bool, str]:
        config = ExporterConfig(endpoint=endpoint, protocol="http/protobuf")
        config.compression = compression  # type: ignore[assignment]
        sender = HttpSender(config)
        try:
            result = await sender.send("traces", BODY)
        finally:
            await sender.close()
        return result.ok, threading.current_thread().name

    with OtlpSink().start() as sink:
        ok, loop_thread = asyncio.run(send(sink.http_endpoint))
        received = sink.received
    assert ok
    assert [r.body for r in received] == [BODY]
    if compression == "gzip":
        assert received[0].headers["content-encoding"] == "gzip"
        assert len(compressed_on) == 1 and compressed_on[0].startswith("otlp-http-gzip")
        assert compressed_on[0] != loop_thread
    else:
        assert "content-encoding" not in received[0].headers and compressed_on == []
