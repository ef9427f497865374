"""The senders' heavy work happens on their own threads, never on the event loop the receivers answer
from (bench/export_loop_stall.py: a 4 MiB batch held the loop for 60-145 ms gzipped for OTLP/HTTP,
~70 ms encoded for the file output): the OTLP/HTTP sender against a real OTLP sink, the file sender
on a real file, and what they deliver is whole and in order."""

from __future__ import annotations

import asyncio
import gzip
import threading

import pytest

from otelsignals.config import ExporterConfig
from otelsignals.otlp.json_decode import decode_trace_request
from otelsignals.pipeline import senders
from otelsignals.pipeline.senders import FileSender, HttpSender
from tests.support.clients import encode_spans, make_spans
from tests.support.otlp_sink import OtlpSink

BODY = encode_spans(make_spans(3, 2)).SerializeToString()


@pytest.mark.parametrize("compression", ["gzip", "none"])
def test_a_body_is_compressed_off_the_event_loop_and_arrives_whole(
    compression: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    compressed_on: list[str] = []
    real_compress = senders.gzip_fast

    def compress(data: bytes) -> bytes:  # the real gzip, noting where it runs
        compressed_on.append(threading.current_thread().name)
        return real_compress(data)

    monkeypatch.setattr(senders, "gzip_fast", compress)

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


@pytest.mark.parametrize("body", [b"", b"x", BODY, BODY * 200, bytes(range(256)) * 4000])
def test_the_fast_gzip_is_gzip(body: bytes) -> None:
    compressed = senders.gzip_fast(body)
    assert compressed[:2] == b"\x1f\x8b" and gzip.decompress(compressed) == body
    if len(body) > 100_000:
        assert len(compressed) < len(body) / 2


def test_the_file_output_encodes_off_the_event_loop_and_keeps_the_order(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded_on: list[str] = []
    real_encode = senders.encode_trace_request

    def encode(request):  # type: ignore[no-untyped-def]  # the real encoder, noting where it runs
        encoded_on.append(threading.current_thread().name)
        return real_encode(request)

    monkeypatch.setattr(senders, "encode_trace_request", encode)
    bodies = [encode_spans(make_spans(n, 1)).SerializeToString() for n in (1, 2, 3)]

    async def send_all() -> tuple[list[bool], str]:
        sender = FileSender(ExporterConfig(file_path=str(tmp_path / "out.jsonl")))
        results = await asyncio.gather(*(sender.send("traces", body) for body in bodies))
        await sender.close()
        await sender.close()  # again: nothing to do
        return [r.ok for r in results], threading.current_thread().name

    oks, loop_thread = asyncio.run(send_all())
    assert oks == [True, True, True]
    assert len(encoded_on) == 3 and all(name.startswith("otlp-file") for name in encoded_on)
    assert loop_thread not in encoded_on
    lines = (tmp_path / "out.jsonl").read_bytes().splitlines()
    assert [decode_trace_request(line).SerializeToString() for line in lines] == bodies
