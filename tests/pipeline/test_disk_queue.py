"""The on-disk queue: what was not finished comes back after a restart, in order, and nothing else;
crashes mid-write and corrupt bytes cost only the damaged record."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from otelsignals.pipeline.disk_queue import DiskQueue, RecoveredRecord

HEADER = 9  # <length u32><crc32 u32><signal u8>


@pytest.fixture
def queues(tmp_path: Path) -> Iterator[list[DiskQueue]]:
    """Every queue a test opens is closed at the end (a 'crashed' one may still hold descriptors)."""
    opened: list[DiskQueue] = []
    yield opened
    for queue in opened:
        queue.close()


def open_queue(
    queues: list[DiskQueue], directory: Path, segment_size: int = 1 << 20, fsync: bool = False
) -> tuple[DiskQueue, list[RecoveredRecord]]:
    """A process start: a new DiskQueue on the directory, recovered."""
    queue = DiskQueue(directory, segment_size, fsync=fsync)
    queues.append(queue)
    return queue, queue.recover()


def contents(records: list[RecoveredRecord]) -> list[tuple[str, bytes]]:
    return [(r.signal, r.payload) for r in records]


def files(directory: Path, suffix: str = "") -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(suffix))


def log_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.log"))


# -- restart ----------------------------------------------------------------------------------------
def test_fresh_directory_recovers_nothing(tmp_path: Path, queues: list[DiskQueue]) -> None:
    queue, recovered = open_queue(queues, tmp_path / "q")
    assert recovered == []
    assert queue.bytes == 0
    assert queue.pending_records == 0
    assert files(tmp_path / "q") == ["00000001.ack", "00000001.log"]


def test_unfinished_records_come_back_in_order(tmp_path: Path, queues: list[DiskQueue]) -> None:
    queue, _ = open_queue(queues, tmp_path)
    a = queue.append("traces", b"trace request A")
    b = queue.append("metrics", b"metrics request")
    c = queue.append("logs", b"")  # an empty body is still a record
    d = queue.append("traces", b"trace request D")
    assert len({a, b, c, d}) == 4
    queue.release(b)
    queue.release(d)
    queue.close()

    queue, recovered = open_queue(queues, tmp_path)
    assert contents(recovered) == [("traces", b"trace request A"), ("logs", b"")]
    assert queue.pending_records == 2


def test_kill_without_close_loses_nothing(tmp_path: Path, queues: list[DiskQueue]) -> None:
    """SIGKILL: no close(), no fsync; what reached the kernel is enough."""
    crashed, _ = open_queue(queues, tmp_path)
    crashed.append("traces", b"one")
    seq = crashed.append("traces", b"two")
    crashed.append("logs", b"three")
    crashed.release(seq)
    _, recovered = open_queue(queues, tmp_path)
    assert contents(recovered) == [("traces", b"one"), ("logs", b"three")]


def test_recovered_records_keep_their_segment_until_finished(tmp_path: Path, queues: list[DiskQueue]) -> None:
    queue, _ = open_queue(queues, tmp_path)
    queue.append("traces", b"x" * 10)
    queue.close()
    assert files(tmp_path, ".log") == ["00000001.log"]
    queue, recovered = open_queue(queues, tmp_path)
    # Taken back where it is (a new segment for what comes next), not copied.
    assert files(tmp_path) == ["00000001.ack", "00000001.log", "00000002.ack", "00000002.log"]
    assert queue.bytes == HEADER + 10 == log_bytes(tmp_path)
    (record,) = recovered
    queue.release(record.seq)  # its segment is finished: deleted
    assert files(tmp_path) == ["00000002.ack", "00000002.log"]
    queue.close()
    _, again = open_queue(queues, tmp_path)
    assert again == []


def test_a_kill_during_start_up_brings_nothing_back_twice(tmp_path: Path, queues: list[DiskQueue]) -> None:
    """Recovery copied the unfinished records to a new segment before deleting the old one: a kill
    in between (a slow start with a large backlog, an OOM kill, a failed liveness probe) left both,
    and every record came back once more per such kill (100 → 200 → 400 → 800)."""
    import subprocess
    import sys
    import textwrap

    queue, _ = open_queue(queues, tmp_path)
    for i in range(100):
        queue.append("traces", b"request %d" % i)
    queue.close()
    killed_at_first_file_removal = textwrap.dedent(
        f"""
        import os, pathlib
        from otelsignals.pipeline.disk_queue import DiskQueue
        def killed(*args, **kwargs):
            os._exit(9)
        pathlib.Path.unlink = pathlib.Path.replace = killed
        DiskQueue({str(tmp_path)!r}, 1 << 20).recover()
        """
    )
    for _ in range(3):
        subprocess.run([sys.executable, "-c", killed_at_first_file_removal], timeout=60, check=False)
        _, recovered = open_queue(queues, tmp_path)
        assert [r.payload for r in recovered] == [b"request %d" % i for i in range(100)]
        queues[-1].close()
    queue, recovered = open_queue(queues, tmp_path)
    for record in recovered[:60]:
        queue.release(record.seq)
    _, recovered = open_queue(queues, tmp_path)  # killed: the acks of this run are kept
    assert [r.payload for r in recovered] == [b"request %d" % i for i in range(60, 100)]


def test_recovering_twice_in_a_row(tmp_path: Path, queues: list[DiskQueue]) -> None:
    queue, _ = open_queue(queues, tmp_path)
    queue.append("traces", b"first")
    queue.append("metrics", b"second")
    queue.close()
    _, once = open_queue(queues, tmp_path)
    queues[-1].close()  # stopped again before anything was sent
    _, twice = open_queue(queues, tmp_path)
    assert contents(once) == contents(twice) == [("traces", b"first"), ("metrics", b"second")]
    queue = queues[-1]
    for record in twice:
        queue.release(record.seq)
    queue.close()
    _, thrice = open_queue(queues, tmp_path)
    assert thrice == []
    assert len(files(tmp_path, ".log")) == 1


def test_finished_records_of_a_recovered_batch_are_not_resent(
    tmp_path: Path, queues: list[DiskQueue]
) -> None:
    queue, _ = open_queue(queues, tmp_path)
    for i in range(5):
        queue.append("traces", b"r%d" % i)
    queue.close()
    queue, recovered = open_queue(queues, tmp_path)
    queue.release(recovered[1].seq)
    queue.release(recovered[3].seq)
    # crash
    _, again = open_queue(queues, tmp_path)
    assert [r.payload for r in again] == [b"r0", b"r2", b"r4"]


# -- units ------------------------------------------------------------------------------------------
def test_a_record_finishes_only_after_all_its_units(tmp_path: Path, queues: list[DiskQueue]) -> None:
    queue, _ = open_queue(queues, tmp_path)
    seq = queue.append("traces", b"three spans", units=3)
    queue.release(seq)
    queue.release(seq)
    assert queue.pending_records == 1
    queue.release(seq)
    assert queue.pending_records == 0
    queue.release(seq)  # an extra release of a finished record is harmless
    assert queue.pending_records == 0
    queue.close()
    _, recovered = open_queue(queues, tmp_path)
    assert recovered == []


def test_partly_released_record_comes_back(tmp_path: Path, queues: list[DiskQueue]) -> None:
    queue, _ = open_queue(queues, tmp_path)
    seq = queue.append("traces", b"three spans", units=3)
    queue.release(seq, units=2)
    queue.close()
    _, recovered = open_queue(queues, tmp_path)
    assert contents(recovered) == [("traces", b"three spans")]


def test_release_several_units_at_once(tmp_path: Path, queues: list[DiskQueue]) -> None:
    queue, _ = open_queue(queues, tmp_path)
    seq = queue.append("traces", b"p", units=4)
    queue.release(seq, units=3)
    assert queue.pending_records == 1
    queue.release(seq, units=5)  # more than left: finished, not negative
    assert queue.pending_records == 0
    queue.close()
    assert open_queue(queues, tmp_path)[1] == []


def test_set_units(tmp_path: Path, queues: list[DiskQueue]) -> None:
    queue, _ = open_queue(queues, tmp_path)
    zero = queue.append("traces", b"no valid spans after all")
    more = queue.append("traces", b"five spans")
    queue.set_units(zero, 0)
    queue.set_units(more, 5)
    assert queue.pending_records == 1
    for _ in range(4):
        queue.release(more)
    assert queue.pending_records == 1
    queue.release(more)
    assert queue.pending_records == 0
    queue.set_units(more, 3)  # a finished record stays finished
    assert queue.pending_records == 0
    queue.close()
    assert open_queue(queues, tmp_path)[1] == []


def test_zero_units_is_finished_at_once(tmp_path: Path, queues: list[DiskQueue]) -> None:
    queue, _ = open_queue(queues, tmp_path)
    queue.append("traces", b"nothing to wait for", units=0)
    kept = queue.append("logs", b"kept")
    assert queue.pending_records == 1
    queue.close()
    queue, recovered = open_queue(queues, tmp_path)
    assert contents(recovered) == [("logs", b"kept")]
    assert kept == recovered[0].seq  # taken back where it was


def test_unknown_seqs_are_ignored(tmp_path: Path, queues: list[DiskQueue]) -> None:
    queue, _ = open_queue(queues, tmp_path)
    seq = queue.append("traces", b"p")
    queue.release(0)
    queue.release(seq + 1)
    queue.release((99 << 32) | 0)
    queue.set_units(seq + 1, 0)
    queue.set_units((99 << 32) | 0, 0)
    assert queue.pending_records == 1


# -- segments ---------------------------------------------------------------------------------------
def test_segments_rotate_and_finished_ones_are_deleted(tmp_path: Path, queues: list[DiskQueue]) -> None:
    record = HEADER + 100
    queue, _ = open_queue(queues, tmp_path, segment_size=3 * record)
    seqs = [queue.append("traces", bytes([i]) * 100) for i in range(7)]  # segments of 3, 3, 1
    assert files(tmp_path, ".log") == ["00000001.log", "00000002.log", "00000003.log"]
    assert [(tmp_path / name).stat().st_size for name in files(tmp_path, ".log")] == [
        3 * record,
        3 * record,
        record,
    ]
    assert queue.bytes == 7 * record == log_bytes(tmp_path)

    for seq in seqs[3:6]:  # all of segment 2
        queue.release(seq)
    assert files(tmp_path) == ["00000001.ack", "00000001.log", "00000003.ack", "00000003.log"]
    assert queue.bytes == 4 * record == log_bytes(tmp_path)

    for seq in seqs[:2]:  # segment 1 not yet complete
        queue.release(seq)
    assert "00000001.log" in files(tmp_path)
    queue.release(seqs[2])
    assert files(tmp_path) == ["00000003.ack", "00000003.log"]

    queue.release(seqs[6])  # the active segment is kept (still written to) even when finished
    assert files(tmp_path) == ["00000003.ack", "00000003.log"]
    assert queue.pending_records == 0
    assert queue.bytes == record == log_bytes(tmp_path)

    queue.append("traces", b"z" * 300)  # does not fit: the finished active segment is dropped
    assert files(tmp_path) == ["00000004.ack", "00000004.log"]
    assert queue.bytes == HEADER + 300 == log_bytes(tmp_path)


def test_segment_files_stay_within_segment_size(tmp_path: Path, queues: list[DiskQueue]) -> None:
    segment_size = 100
    queue, _ = open_queue(queues, tmp_path, segment_size=segment_size)
    payloads = [b"p" * n for n in (10, 60, 10, 25, 20, 91, 40, 5, 5, 5, 200, 1, 82)]
    for payload in payloads:
        queue.append("traces", payload)
    sizes = [(tmp_path / name).stat().st_size for name in files(tmp_path, ".log")]
    # A segment only goes over its size when it holds a single record bigger than that.
    assert all(size <= segment_size or size == HEADER + 200 for size in sizes), sizes
    assert sum(sizes) == sum(HEADER + len(p) for p in payloads) == queue.bytes
    queue.close()
    _, recovered = open_queue(queues, tmp_path, segment_size=segment_size)
    assert [r.payload for r in recovered] == payloads


def test_recovery_spanning_several_segments(tmp_path: Path, queues: list[DiskQueue]) -> None:
    queue, _ = open_queue(queues, tmp_path, segment_size=64)
    seqs = [queue.append("traces", b"%02d" % i * 10) for i in range(10)]
    for seq in seqs[::3]:
        queue.release(seq)
    queue.close()
    queue, recovered = open_queue(queues, tmp_path, segment_size=64)
    expected = [b"%02d" % i * 10 for i in range(10) if i % 3]
    assert [r.payload for r in recovered] == expected
    assert queue.bytes == log_bytes(tmp_path)  # the segments still holding unfinished records


# -- damage -----------------------------------------------------------------------------------------
def _three_records(queues: list[DiskQueue], directory: Path) -> Path:
    queue, _ = open_queue(queues, directory)
    for payload in (b"first record", b"second record", b"third record"):
        queue.append("traces", payload)
    queue.close()
    (log,) = directory.glob("*.log")
    return log


@pytest.mark.parametrize(
    "chop", [1, 5, len(b"third record"), len(b"third record") + 4, len(b"third record") + HEADER - 1]
)
def test_truncated_last_record_is_skipped(
    tmp_path: Path, queues: list[DiskQueue], chop: int, caplog: pytest.LogCaptureFixture
) -> None:
    log = _three_records(queues, tmp_path)
    data = log.read_bytes()
    log.write_bytes(data[:-chop])  # the crash came mid-write
    with caplog.at_level(logging.WARNING, logger="otelsignals.disk_queue"):
        queue, recovered = open_queue(queues, tmp_path)
    assert [r.payload for r in recovered] == [b"first record", b"second record"]
    if chop <= len(b"third record"):  # the header made it: the partial record is reported
        assert any("partly written" in message for message in caplog.messages)
    assert queue.bytes == log_bytes(tmp_path)


def test_corrupt_record_is_skipped_and_the_rest_kept(
    tmp_path: Path, queues: list[DiskQueue], caplog: pytest.LogCaptureFixture
) -> None:
    log = _three_records(queues, tmp_path)
    data = bytearray(log.read_bytes())
    second_payload = HEADER + len(b"first record") + HEADER
    data[second_payload + 3] ^= 0x40
    log.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="otelsignals.disk_queue"):
        _, recovered = open_queue(queues, tmp_path)
    assert [r.payload for r in recovered] == [b"first record", b"third record"]
    assert any("corrupt" in message for message in caplog.messages)


def test_corrupt_record_keeps_acks_aligned(tmp_path: Path, queues: list[DiskQueue]) -> None:
    """A skipped record still counts as a record: the acks of those after it stay theirs."""
    queue, _ = open_queue(queues, tmp_path)
    queue.append("traces", b"first record")
    queue.append("traces", b"second record")
    third = queue.append("traces", b"third record")
    queue.append("traces", b"fourth record")
    queue.release(third)
    queue.close()
    (log,) = tmp_path.glob("*.log")
    data = bytearray(log.read_bytes())
    data[HEADER + len(b"first record") + HEADER] ^= 0xFF
    log.write_bytes(bytes(data))
    _, recovered = open_queue(queues, tmp_path)
    assert [r.payload for r in recovered] == [b"first record", b"fourth record"]


@pytest.mark.parametrize("damaged_byte", [0, 2, 3])  # the second record's length, low to high byte
def test_a_damaged_length_costs_only_its_record_and_the_segment_is_kept(
    tmp_path: Path, queues: list[DiskQueue], damaged_byte: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A length field damaged mid-file made the rest of the segment unreadable, with a warning that
    nothing acknowledged was lost, and the file was deleted. Now the next whole record is found:
    only the damaged one is lost, said as an error, and the file is kept (``.corrupt``). Records
    after the damage come back even if finished: their numbers, which the acks use, are not known."""
    queue, _ = open_queue(queues, tmp_path)
    seqs = [queue.append("traces", b"record %d" % i) for i in range(10)]
    queue.release(seqs[0])
    queue.release(seqs[7])
    queue.close()
    (log,) = tmp_path.glob("*.log")
    data = bytearray(log.read_bytes())
    data[HEADER + len(b"record 0") + damaged_byte] ^= 0x5A
    log.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="otelsignals.disk_queue"):
        queue, recovered = open_queue(queues, tmp_path)
    assert [r.payload for r in recovered] == [b"record %d" % i for i in range(2, 10)]
    assert any("damaged" in message and "lost" in message for message in caplog.messages)
    assert not any("partly written" in message for message in caplog.messages)
    assert files(tmp_path) == ["00000001.corrupt", "00000002.ack", "00000002.log"]
    for record in recovered:
        queue.release(record.seq)
    queue.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="otelsignals.disk_queue"):
        assert open_queue(queues, tmp_path)[1] == []
    # The kept file is not the queue's: each start says it is there, until someone removes it.
    kept = (tmp_path / "00000001.corrupt").stat().st_size
    assert any(f"1 damaged segments are kept for inspection ({kept} bytes" in m for m in caplog.messages)


def test_a_damaged_length_that_skips_whole_records_is_damage_not_one_bad_record(
    tmp_path: Path, queues: list[DiskQueue]
) -> None:
    """A length whose damage lands it on a later whole record passed for one corrupt record: the
    records it skipped were not counted, every later record took another's number, and the acks
    then named other records (an unfinished one taken as finished: lost)."""
    import struct

    queue, _ = open_queue(queues, tmp_path)
    seqs = [queue.append("traces", payload) for payload in (b"A" * 20, b"B" * 20, b"C" * 20, b"D" * 20)]
    queue.release(seqs[2])  # C was delivered
    queue.close()
    (log,) = tmp_path.glob("*.log")
    data = bytearray(log.read_bytes())
    struct.pack_into("<I", data, 0, 20 + HEADER + 20)  # A's length now ends where C starts
    log.write_bytes(bytes(data))
    _, recovered = open_queue(queues, tmp_path)
    assert [r.payload[:1] for r in recovered] == [b"B", b"C", b"D"]  # C again rather than D lost


def test_a_request_that_does_not_fit_on_disk_is_refused_and_the_others_kept(tmp_path: Path) -> None:
    """The disk is full (here: a file size limit): a record written in part made every later record
    unreadable, though each of their clients was answered. Now the append raises (the receiver
    refuses the request, its client retries) and every append that returned comes back."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        f"""
        import resource, sys
        from otelsignals.pipeline.disk_queue import DiskQueue, DiskQueueFull
        queue = DiskQueue({str(tmp_path)!r}, 1 << 20)
        queue.recover()
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (3000, hard))
        kept, refused = [], 0
        for i in range(40):
            if i == 30:
                resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space again
            try:
                queue.append("traces", b"request %02d " % i + bytes(200))
                kept.append(i)
            except DiskQueueFull:
                refused += 1
        print(refused, ",".join(map(str, kept)))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    refused, kept = out.stdout.split()
    assert int(refused) > 0
    queues: list[DiskQueue] = []
    _, recovered = open_queue(queues, tmp_path)
    assert [r.payload[:11] for r in recovered] == [b"request %02d " % int(i) for i in kept.split(",")]
    for queue in queues:
        queue.close()


def test_unknown_signal_code_is_skipped(tmp_path: Path, queues: list[DiskQueue]) -> None:
    log = _three_records(queues, tmp_path)
    data = bytearray(log.read_bytes())
    data[HEADER - 1] = 200  # first record's signal byte
    log.write_bytes(bytes(data))
    _, recovered = open_queue(queues, tmp_path)
    assert [r.payload for r in recovered] == [b"second record", b"third record"]


def test_flipped_signal_byte_naming_another_signal_is_skipped(
    tmp_path: Path, queues: list[DiskQueue]
) -> None:
    """The checksum covers the signal too: a traces record never comes back as metrics."""
    log = _three_records(queues, tmp_path)
    data = bytearray(log.read_bytes())
    data[HEADER - 1] = 1  # "metrics", a valid code
    log.write_bytes(bytes(data))
    _, recovered = open_queue(queues, tmp_path)
    assert [(r.signal, r.payload) for r in recovered] == [
        ("traces", b"second record"),
        ("traces", b"third record"),
    ]


def test_truncated_ack_file(tmp_path: Path, queues: list[DiskQueue]) -> None:
    queue, _ = open_queue(queues, tmp_path)
    first = queue.append("traces", b"first")
    second = queue.append("traces", b"second")
    queue.append("traces", b"third")
    queue.release(first)
    queue.release(second)
    queue.close()
    (ack,) = tmp_path.glob("*.ack")
    ack.write_bytes(ack.read_bytes()[:-2])  # the second ack was half written
    _, recovered = open_queue(queues, tmp_path)
    # At least once: a half-written ack means not finished.
    assert [r.payload for r in recovered] == [b"second", b"third"]


def test_missing_ack_file_means_nothing_finished(tmp_path: Path, queues: list[DiskQueue]) -> None:
    queue, _ = open_queue(queues, tmp_path)
    queue.release(queue.append("traces", b"a"))
    queue.append("traces", b"b")
    queue.close()
    for ack in tmp_path.glob("*.ack"):
        ack.unlink()
    _, recovered = open_queue(queues, tmp_path)
    assert [r.payload for r in recovered] == [b"a", b"b"]


def test_stray_files_are_left_alone_and_orphan_acks_cleaned(tmp_path: Path, queues: list[DiskQueue]) -> None:
    queue, _ = open_queue(queues, tmp_path)
    queue.append("traces", b"a")
    queue.close()
    (tmp_path / "README.log").write_text("not a segment")
    (tmp_path / "00000000.ack").write_bytes(b"\x00\x00\x00\x00")  # its .log was deleted before a crash
    _, recovered = open_queue(queues, tmp_path)
    assert [r.payload for r in recovered] == [b"a"]
    assert files(tmp_path) == ["00000001.ack", "00000001.log", "00000002.ack", "00000002.log", "README.log"]


# -- bytes ------------------------------------------------------------------------------------------
def test_bytes_counts_what_is_on_disk(tmp_path: Path, queues: list[DiskQueue]) -> None:
    queue, _ = open_queue(queues, tmp_path, segment_size=50, fsync=True)
    assert queue.bytes == 0
    seqs = []
    for n in (10, 20, 30, 40, 5):
        seqs.append(queue.append("logs", b"b" * n))
        assert queue.bytes == log_bytes(tmp_path)
    assert queue.bytes == sum(HEADER + n for n in (10, 20, 30, 40, 5))
    for seq in seqs:
        queue.release(seq)
        assert queue.bytes == log_bytes(tmp_path)
    queue.close()
    queue, _ = open_queue(queues, tmp_path, segment_size=50)
    assert queue.bytes == 0 == log_bytes(tmp_path)
