"""The exporter holds a batch only while it is queued or being delivered."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

from otelsignals.config import ExporterConfig
from otelsignals.pipeline.exporter import Batch, Exporter
from otelsignals.pipeline.senders import make_sender
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
