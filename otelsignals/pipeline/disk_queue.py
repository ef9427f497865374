"""Write-ahead log of accepted requests, so a restart or SIGKILL loses nothing acknowledged.

A request is appended here before its client is answered. It stays until every span it carried has
been taken by the downstream (or given up for good), which the exporter reports unit by unit. On
start-up, whatever was not finished is read back and goes through the pipeline again: delivery is
at-least-once, as with the Collector's persistent queue.

Layout: segment files ``NNNNNNNN.log`` holding records ``<length u32><crc32 u32><signal u8><payload>``
(the checksum covers the signal byte and the payload)
and, beside each, ``NNNNNNNN.ack`` holding the u32 indexes of finished records. A segment is
deleted once it is no longer written to and all its records are finished. Writes go straight to the
kernel (no user-space buffer), which survives a process kill; ``fsync`` also survives power loss.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from otelsignals.config import QueueConfig
from otelsignals.otlp.wire import SpanRecord

logger = logging.getLogger("otelsignals.disk_queue")

_HEADER = struct.Struct("<IIB")
_ACK = struct.Struct("<I")
SIGNALS = ("traces", "metrics", "logs")
_SEGMENT_BITS = 32


@dataclass
class _Segment:
    number: int
    log_fd: int
    ack_fd: int
    size: int = 0
    records: int = 0
    finished: int = 0
    remaining_units: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RecoveredRecord:
    seq: int
    signal: str
    payload: bytes


class DiskQueue:
    def __init__(self, directory: str | Path, segment_size: int, fsync: bool = False) -> None:
        self.directory = Path(directory)
        self.segment_size = segment_size
        self.fsync = fsync
        self.directory.mkdir(parents=True, exist_ok=True)
        self._segments: dict[int, _Segment] = {}
        self._active: _Segment | None = None
        self.bytes = 0

    # -- start-up -------------------------------------------------------------------------------
    def recover(self) -> list[RecoveredRecord]:
        """Read back unfinished records of earlier runs, re-log them in a fresh segment and return them."""
        leftovers: list[tuple[str, bytes]] = []
        old_numbers = sorted(int(p.stem) for p in self.directory.glob("*.log") if p.stem.isdigit())
        # An .ack whose .log is gone (a crash between the two unlinks of a dropped segment) has
        # nothing to recover; it is removed with the rest, and its number is never reused.
        old_acks = {int(p.stem) for p in self.directory.glob("*.ack") if p.stem.isdigit()}
        for number in old_numbers:
            leftovers.extend(self._read_unfinished(number))
        self._open_segment(max([*old_numbers, *old_acks], default=0) + 1)
        recovered = [
            RecoveredRecord(self.append(signal, payload), signal, payload) for signal, payload in leftovers
        ]
        if recovered:
            self._sync(self._active)
        for number in old_numbers:
            self._path(number, ".log").unlink(missing_ok=True)
        for number in old_acks.union(old_numbers):
            self._path(number, ".ack").unlink(missing_ok=True)
        if recovered:
            logger.info(
                "recovered %d unfinished requests from the disk queue",
                len(recovered),
                extra={"fields": {"directory": str(self.directory)}},
            )
        return recovered

    def _read_unfinished(self, number: int) -> list[tuple[str, bytes]]:
        data = self._path(number, ".log").read_bytes()
        ack_path = self._path(number, ".ack")
        ack_bytes = ack_path.read_bytes() if ack_path.exists() else b""
        usable = len(ack_bytes) - len(ack_bytes) % _ACK.size
        finished = {i for (i,) in _ACK.iter_unpack(ack_bytes[:usable])}
        out = []
        offset = index = 0
        while offset + _HEADER.size <= len(data):
            length, crc, signal_code = _HEADER.unpack_from(data, offset)
            start = offset + _HEADER.size
            payload = data[start : start + length]
            if len(payload) < length:
                logger.warning(
                    "disk queue segment %s ends with a partly written record; it was never "
                    "acknowledged to its client and is skipped",
                    number,
                )
                break
            if _checksum(signal_code, payload) != crc or signal_code >= len(SIGNALS):
                logger.warning("disk queue segment %s: record %d is corrupt and is skipped", number, index)
            elif index not in finished:
                out.append((SIGNALS[signal_code], payload))
            offset = start + length
            index += 1
        return out

    # -- running --------------------------------------------------------------------------------
    def append(self, signal: str, payload: bytes, units: int = 1) -> int:
        """Log a record that will be finished after ``units`` calls' worth of :meth:`release`."""
        segment = self._active
        assert segment is not None, "recover() opens the first segment"
        record_size = _HEADER.size + len(payload)
        # The header counts too: otherwise every segment could end up a header over its size.
        if segment.size and segment.size + record_size > self.segment_size:
            self._sync(segment)
            segment = self._open_segment(segment.number + 1)
        code = SIGNALS.index(signal)
        header = _HEADER.pack(len(payload), _checksum(code, payload), code)
        os.write(segment.log_fd, header + payload)
        if self.fsync:
            os.fsync(segment.log_fd)
        index = segment.records
        segment.records += 1
        segment.size += record_size
        self.bytes += record_size
        seq = (segment.number << _SEGMENT_BITS) | index
        if units <= 0:
            self._finish(segment, index)
        else:
            segment.remaining_units[index] = units
        return seq

    def set_units(self, seq: int, units: int) -> None:
        """Change how many units a pending record waits for (0 finishes it)."""
        segment = self._segments.get(seq >> _SEGMENT_BITS)
        index = seq & ((1 << _SEGMENT_BITS) - 1)
        if segment is None or index not in segment.remaining_units:
            return
        if units <= 0:
            del segment.remaining_units[index]
            self._finish(segment, index)
        else:
            segment.remaining_units[index] = units

    def release(self, seq: int, units: int = 1) -> None:
        segment = self._segments.get(seq >> _SEGMENT_BITS)
        if segment is None:
            return
        index = seq & ((1 << _SEGMENT_BITS) - 1)
        left = segment.remaining_units.get(index)
        if left is None:
            return
        if left > units:
            segment.remaining_units[index] = left - units
            return
        del segment.remaining_units[index]
        self._finish(segment, index)

    def release_spans(self, records: Iterable[SpanRecord]) -> None:
        """Spans that will not be delivered (the sampler dropped them) leave as if they had been."""
        for record in records:
            if record.ingest_seq:
                self.release(record.ingest_seq)

    def close(self) -> None:
        for segment in list(self._segments.values()):
            self._sync(segment)
            os.close(segment.log_fd)
            os.close(segment.ack_fd)
        self._segments.clear()
        self._active = None

    @property
    def pending_records(self) -> int:
        return sum(s.records - s.finished for s in self._segments.values())

    # -- internals ------------------------------------------------------------------------------
    def _finish(self, segment: _Segment, index: int) -> None:
        os.write(segment.ack_fd, _ACK.pack(index))
        segment.finished += 1
        if segment.finished == segment.records and segment is not self._active:
            self._drop(segment)

    def _open_segment(self, number: int) -> _Segment:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        segment = _Segment(
            number,
            os.open(self._path(number, ".log"), flags, 0o600),
            os.open(self._path(number, ".ack"), flags, 0o600),
        )
        self._segments[number] = segment
        previous, self._active = self._active, segment
        if previous is not None and previous.finished == previous.records:
            self._drop(previous)
        return segment

    def _drop(self, segment: _Segment) -> None:
        os.close(segment.log_fd)
        os.close(segment.ack_fd)
        for suffix in (".log", ".ack"):
            self._path(segment.number, suffix).unlink(missing_ok=True)
        self.bytes -= segment.size
        del self._segments[segment.number]

    def _sync(self, segment: _Segment | None) -> None:
        if segment is not None and self.fsync:
            os.fsync(segment.log_fd)
            os.fsync(segment.ack_fd)

    def _path(self, number: int, suffix: str) -> Path:
        return self.directory / f"{number:08d}{suffix}"


def _checksum(signal_code: int, payload: bytes) -> int:
    return zlib.crc32(payload, zlib.crc32(bytes((signal_code,))))


def create_disk_queue(config: QueueConfig) -> DiskQueue | None:
    """The on-disk queue of ``exporter.queue``; None when no ``directory`` is set (memory only)."""
    if not config.directory:
        return None
    return DiskQueue(config.directory, config.segment_size, config.fsync)
