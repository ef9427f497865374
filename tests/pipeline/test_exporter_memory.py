"""The exporter holds a batch only while it is queued or being delivered."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

from otelsignals.config import Duration, ExporterConfig
from otelsignals.pipeline.exporter import Batch, Exporter
from otelsignals.pipeline.senders import SendResult, make_sender
from otelsignals.telemetry import Telemetry
from tests.support.clients import encode_spans, make_spans


def live_batches() -> int:
    gc.collect()
    return sum(isinstance(item, Batch) for item in gc.get_objects())


async def test_a_delivered_batch_is_not_kept_by_its_worker(tmp_path: Path) -> None:
    # A worker waiting for the next batch once kept its last one (up to exporter.batch.max_bytes,
    # 4 MiB by default, per queue.num_consumers worker) as a local variable.
    config = ExporterConfig(endpoint="", file_path=str(tmp_path / "enriched.jsonl"))
    delivered: list[int] = []
    exporter = Exporter(config, make_sender(config), Telemetry(), on_done=lambda batch: delivered.append(1))
    exporter.start()
    before = live_batches()  # other tests' batches, if any are still alive
    body = encode_spans(make_spans(3, 2)).SerializeToString()
    for _ in range(config.queue.num_consumers):
        exporter.add_raw("traces", body)
        await asyncio.sleep(0.05)
    async with asyncio.timeout(10):
        while len(delivered) < config.queue.num_consumers:
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # the workers are back to waiting
    assert live_batches() == before
    await exporter.stop(5.0)
    assert (tmp_path / "enriched.jsonl").read_text().count("\n") == config.queue.num_consumers


async def test_a_sender_that_raises_keeps_its_batch_and_its_worker_goes_on() -> None:
    """A sender's bug (an exception instead of a SendResult) once ended the worker that met it, with
    nothing logged; with every worker gone, nothing was exported and the queue filled up. It is no
    refusal by the downstream either: the batch is retried, not dropped."""

    class Flaky:
        def __init__(self) -> None:
            self.calls = 0

        async def send(self, signal: str, body: bytes) -> SendResult:
            self.calls += 1
            if self.calls <= 2:
                raise ValueError("Invalid header value b'abc\\n'")
            return SendResult(True)

        async def close(self) -> None:
            return None

    config = ExporterConfig(endpoint="")
    config.queue.num_consumers = 1
    config.retry.initial_interval = Duration(0.01)
    telemetry = Telemetry()
    delivered: list[int] = []
    exporter = Exporter(config, Flaky(), telemetry, on_done=lambda batch: delivered.append(1))
    exporter.start()
    body = encode_spans(make_spans(3, 2)).SerializeToString()
    for _ in range(3):
        exporter.add_raw("traces", body)
    async with asyncio.timeout(10):
        while len(delivered) < 3:
            await asyncio.sleep(0.01)
    retried = telemetry.export_retries.labels("sender_error")._value.get()
    forwarded = telemetry.forwarded_requests.labels("traces")._value.get()
    await exporter.stop(5.0)
    assert (retried, forwarded, exporter.backlog) == (2, 3, 0)
