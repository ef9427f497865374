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

import contextlib
import errno
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


class DiskQueueFull(OSError):
    """A request could not be written to the disk queue (the disk is full, a file size limit): it
    is refused, so that its client retries, rather than acknowledged and not kept."""


@dataclass
class _Segment:
    number: int
    log_fd: int
    ack_fd: int
    size: int = 0
    records: int = 0
    finished: int = 0
    remaining_units: dict[int, int] = field(default_factory=dict)


@dataclass
class _Scan:
    size: int
    finished: set[int]
    records: int = 0
    unfinished: list[tuple[int, str, bytes]] = field(default_factory=list)
    damaged: bool = False


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
        """Read back unfinished records of earlier runs and return them. A segment is taken back as
        it is: its unfinished records keep their places (and seqs) and their acks go on to its own
        ack file, so a kill during start-up leaves nothing twice (copying them to a new segment, as
        before 2026-12-02, left the copies and the originals both when killed in between: every
        record came back once more per such kill). Only a damaged segment is copied: its records
        after the damage go to the new segment and the file is kept as ``NNNNNNNN.corrupt``."""
        old_numbers = sorted(int(p.stem) for p in self.directory.glob("*.log") if p.stem.isdigit())
        # An .ack whose .log is gone (a crash between the two unlinks of a dropped segment) has
        # nothing to recover; it is removed, and its number is never reused.
        old_acks = {int(p.stem) for p in self.directory.glob("*.ack") if p.stem.isdigit()}
        recovered: list[RecoveredRecord] = []
        copies: list[tuple[str, bytes]] = []
        damaged: list[int] = []
        for number in old_numbers:
            scan = self._scan(number)
            if scan.damaged:
                copies += [(signal, payload) for _, signal, payload in scan.unfinished]
                damaged.append(number)
                continue
            segment = self._reopen(number, scan)
            for index, signal, payload in scan.unfinished:
                segment.remaining_units[index] = 1
                recovered.append(RecoveredRecord((number << _SEGMENT_BITS) | index, signal, payload))
        for number in old_acks.difference(old_numbers):
            self._path(number, ".ack").unlink(missing_ok=True)
        self._open_segment(max([*old_numbers, *old_acks], default=0) + 1)
        recovered += [
            RecoveredRecord(self.append(signal, payload), signal, payload) for signal, payload in copies
        ]
        if copies:
            self._sync(self._active)
        for number in damaged:
            self._path(number, ".log").replace(self._path(number, ".corrupt"))
            self._path(number, ".ack").unlink(missing_ok=True)
        self._warn_of_corrupt_files()
        if recovered:
            logger.info(
                "recovered %d unfinished requests from the disk queue",
                len(recovered),
                extra={"fields": {"directory": str(self.directory)}},
            )
        return recovered

    def _warn_of_corrupt_files(self) -> None:
        """Damaged segments kept for inspection are not the queue's (not in ``bytes``, never
        removed): every start says they are there and what they take, until someone removes them."""
        kept = sorted(self.directory.glob("*.corrupt"))
        if kept:
            logger.warning(
                "disk queue: %d damaged segments are kept for inspection (%d bytes, not counted in "
                "the queue's size); remove them when done: %s",
                len(kept),
                sum(path.stat().st_size for path in kept),
                ", ".join(path.name for path in kept),
            )

    def _scan(self, number: int) -> _Scan:
        """The records of segment ``number`` that are not finished, with their indexes. Records are
        numbered by their place in the file, as the acks name them; a record whose checksum fails
        (its framing intact) is skipped and keeps its number. Where the framing is lost (a length
        that runs past the end or onto bytes that are no record), the next whole record is looked
        for: found, the segment is damaged (how many records the lost bytes held is not known, so
        every record after them is taken as unfinished); not found, the file ends with a write the
        process did not finish (its client was never answered) or with damage, and reading stops."""
        data = self._path(number, ".log").read_bytes()
        ack_path = self._path(number, ".ack")
        ack_bytes = ack_path.read_bytes() if ack_path.exists() else b""
        usable = len(ack_bytes) - len(ack_bytes) % _ACK.size
        finished = {i for (i,) in _ACK.iter_unpack(ack_bytes[:usable])}
        scan = _Scan(size=len(data), finished=finished)
        offset = index = 0
        while offset + _HEADER.size <= len(data):
            length, _, signal_code = _HEADER.unpack_from(data, offset)
            start = offset + _HEADER.size
            end = start + length
            if _whole_record_at(data, offset):
                if scan.damaged or index not in finished:
                    scan.unfinished.append((index, SIGNALS[signal_code], data[start:end]))
                offset = end
                index += 1
                continue
            # Only it is bad when its length leads to the next record and no whole record starts
            # within it (a damaged length that skipped whole records would shift the numbering of
            # every record after it, and the acks would then name other records).
            if (
                end <= len(data)
                and _at_record_or_end(data, end)
                and _next_record(data, offset + 1, end) is None
            ):
                logger.warning("disk queue segment %s: record %d is corrupt and is skipped", number, index)
                offset = end
                index += 1
                continue
            resume = _next_record(data, offset + 1)
            if resume is None:
                logger.warning(
                    "disk queue segment %s ends with %d bytes that are not a whole record: a record "
                    "partly written when the process ended (its client was not answered), or damage",
                    number,
                    len(data) - offset,
                )
                break
            logger.error(
                "disk queue segment %s: %d bytes at offset %d are damaged and cannot be read; the "
                "requests they held are lost, and the records after them are sent again whether "
                "they were finished or not",
                number,
                resume - offset,
                offset,
            )
            scan.damaged = True
            offset = resume
        scan.records = index
        return scan

    def _reopen(self, number: int, scan: _Scan) -> _Segment:
        """Segment ``number`` of an earlier run, taken back: its acks go on to its own file."""
        segment = self._segment_files(number)
        segment.size, segment.records = scan.size, scan.records
        segment.finished = scan.records - len(scan.unfinished)
        self._segments[number] = segment
        self.bytes += scan.size
        if not scan.unfinished:
            self._drop(segment)
        return segment

    # -- running --------------------------------------------------------------------------------
    def append(self, signal: str, payload: bytes, units: int = 1) -> int:
        """Log a record that will be finished after ``units`` calls' worth of :meth:`release`."""
        segment = self._active
        assert segment is not None, "recover() opens the first segment"
        record_size = _HEADER.size + len(payload)
        # The header counts too: otherwise every segment could end up a header over its size.
        if segment.size and segment.size + record_size > self.segment_size:
            self._sync(segment)
            try:
                segment = self._open_segment(segment.number + 1)
            except OSError as error:  # no room for a new file, no descriptor left: refused as well
                message = f"the disk queue could not start a new segment in {self.directory}: {error}"
                raise DiskQueueFull(message) from error
        code = SIGNALS.index(signal)
        record = memoryview(_HEADER.pack(len(payload), _checksum(code, payload), code) + payload)
        written = 0
        try:
            while written < len(record):
                step = os.write(segment.log_fd, record[written:])
                if step == 0:
                    raise OSError(errno.ENOSPC, "no byte written")
                written += step
            if self.fsync:
                os.fsync(segment.log_fd)
        except OSError as error:
            # A record written in part would be read as the file's end: the records after it lost.
            # It is cut off again, and the next records go to a segment of their own (in case the
            # cut failed too); the caller refuses the request, whose client retries.
            with contextlib.suppress(OSError):
                os.ftruncate(segment.log_fd, segment.size)
            if written:
                with contextlib.suppress(OSError):
                    self._open_segment(segment.number + 1)
            raise DiskQueueFull(
                f"the disk queue could not write a {len(record)}-byte request to {self.directory}: {error}"
            ) from error
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

    def _segment_files(self, number: int) -> _Segment:
        """Segment ``number``'s log and ack files opened for appending (created when missing)."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        log_fd = os.open(self._path(number, ".log"), flags, 0o600)
        try:
            ack_fd = os.open(self._path(number, ".ack"), flags, 0o600)
        except OSError:
            os.close(log_fd)
            raise
        return _Segment(number, log_fd, ack_fd)

    def _open_segment(self, number: int) -> _Segment:
        segment = self._segment_files(number)
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


def _whole_record_at(data: bytes, offset: int) -> bool:
    """Whether a record with a good checksum starts at ``offset``."""
    if offset + _HEADER.size > len(data):
        return False
    length, crc, signal_code = _HEADER.unpack_from(data, offset)
    start = offset + _HEADER.size
    end = start + length
    return end <= len(data) and signal_code < len(SIGNALS) and _checksum(signal_code, data[start:end]) == crc


def _at_record_or_end(data: bytes, offset: int) -> bool:
    """Whether ``offset`` is where a record may start: the end of the file, a header cut short, or a
    whole record. A record's length is trusted only so: a damaged one would make the bytes after
    it be read as records."""
    return offset + _HEADER.size > len(data) or _whole_record_at(data, offset)


def _next_record(data: bytes, offset: int, before: int | None = None) -> int | None:
    """Where the first whole record at or after ``offset`` (and before ``before``) starts, None if
    there is none."""
    for at in range(offset, min(len(data), before if before is not None else len(data)) - _HEADER.size + 1):
        if _whole_record_at(data, at):
            return at
    return None


def create_disk_queue(config: QueueConfig) -> DiskQueue | None:
    """The on-disk queue of ``exporter.queue``; None when no ``directory`` is set (memory only)."""
    if not config.directory:
        return None
    return DiskQueue(config.directory, config.segment_size, config.fsync)
