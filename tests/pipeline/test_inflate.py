"""The receivers' decompression of gzip and deflate bodies (ISA-L): whole bodies back, bombs stopped
within one step of the limit, broken bodies refused with a reason."""

from __future__ import annotations

import gzip
import zlib

import pytest

from otelsignals.pipeline.intake import RequestRejected, inflate

BODY = b"".join(
    f"span {n}: the agent called search_flights and got 3 results. ".encode() for n in range(20_000)
)
LIMIT = 4 * 1024**2

COMPRESSED = {"gzip": gzip.compress, "deflate": zlib.compress}


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
@pytest.mark.parametrize("body", [b"", b"x", BODY, BODY * 3])
def test_a_body_inflates_whole(encoding: str, body: bytes) -> None:
    assert inflate(COMPRESSED[encoding](body), encoding, LIMIT) == body


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_bomb_is_refused_before_it_is_inflated(encoding: str) -> None:
    bomb = COMPRESSED[encoding](bytes(64 * 1024**2))  # 64 MiB of zeros in 64 KiB
    with pytest.raises(RequestRejected) as refused:
        inflate(bomb, encoding, LIMIT)
    assert (refused.value.kind, refused.value.reason) == ("too_large", "too_large")


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
@pytest.mark.parametrize(
    ("broken", "says"),
    [
        (lambda packed: b"not compressed at all", "not valid"),
        (lambda packed: packed[: len(packed) // 2], "truncated"),
        (lambda packed: packed[:10] + bytes(64) + packed[74:], "not valid"),
    ],
)
def test_a_broken_body_is_refused_with_a_reason(encoding: str, broken, says: str) -> None:
    with pytest.raises(RequestRejected) as refused:
        inflate(broken(COMPRESSED[encoding](BODY)), encoding, LIMIT)
    assert (refused.value.kind, refused.value.reason) == ("invalid", "bad_encoding")
    assert says in refused.value.message


@pytest.mark.parametrize(
    "members",
    [
        [b"first member, ", b"second member"],
        [BODY, BODY[:1000], b""],  # an empty member is still a member
        [b"x"] * 50,
    ],
)
def test_every_member_of_a_gzip_body_is_inflated(members: list[bytes]) -> None:
    """RFC 1952 lets a gzip body be several members end to end; gzip readers (Go's, the Collector's)
    read them all, so a client may send them and be told its spans were taken."""
    body = b"".join(gzip.compress(member) for member in members)
    assert inflate(body, "gzip", LIMIT) == b"".join(members)


def test_the_limit_counts_a_gzip_bodys_members_together() -> None:
    quarter = bytes(LIMIT // 4 + 1)
    assert inflate(gzip.compress(quarter) * 3, "gzip", LIMIT) == quarter * 3
    with pytest.raises(RequestRejected) as refused:
        inflate(gzip.compress(quarter) * 4, "gzip", LIMIT)
    assert (refused.value.kind, refused.value.reason) == ("too_large", "too_large")


@pytest.mark.parametrize(
    ("encoding", "trailer", "says"),
    [
        ("gzip", b"garbage!!", "not another gzip member"),
        ("gzip", bytes(8), "not another gzip member"),  # zero padding: not a member either
        ("gzip", gzip.compress(b"next", mtime=0)[:12], "truncated"),  # a second member cut short
        ("gzip", b"\x1f\x8bnot a member at all", "not valid"),  # its magic, then no member
        ("deflate", b"garbage!!", "not deflate"),
        ("deflate", zlib.compress(b"a second stream"), "not deflate"),  # zlib has no members
    ],
    ids=[
        "garbage",
        "zero-padding",
        "second-member-cut",
        "magic-then-garbage",
        "deflate-garbage",
        "deflate-twice",
    ],
)
def test_bytes_after_the_compressed_data_are_refused_not_dropped(
    encoding: str, trailer: bytes, says: str
) -> None:
    with pytest.raises(RequestRejected) as refused:
        inflate(COMPRESSED[encoding](BODY) + trailer, encoding, LIMIT)
    assert (refused.value.kind, refused.value.reason) == ("invalid", "bad_encoding")
    assert says in refused.value.message


def test_a_body_of_very_many_gzip_members_is_refused_once_it_passes_the_bound() -> None:
    """Each member took a copy of the body's rest: 16 MiB of empty 20-byte members ran for minutes
    on the inflate thread. The input is now given in small steps (copies stay small) and a body of
    more than MAX_GZIP_MEMBERS members is refused as it reaches the next one."""
    from otelsignals.pipeline.intake import MAX_GZIP_MEMBERS

    member = gzip.compress(b"x", mtime=0)
    assert inflate(member * MAX_GZIP_MEMBERS, "gzip", LIMIT) == b"x" * MAX_GZIP_MEMBERS
    with pytest.raises(RequestRejected) as refused:
        inflate(member * (16 * 1024**2 // len(member)), "gzip", LIMIT)
    assert (
        refused.value.reason == "bad_encoding"
        and f"more than {MAX_GZIP_MEMBERS} members" in refused.value.message
    )


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_body_larger_than_one_input_step_inflates_whole(encoding: str) -> None:
    import random

    body = random.Random(7).randbytes(300_000) + BODY  # incompressible: many 64 KiB input steps
    packed = COMPRESSED[encoding](body)
    assert len(packed) > 4 * 64 * 1024
    assert inflate(packed, encoding, LIMIT) == body
    if encoding == "gzip":  # and a second member after a first one of many steps
        assert inflate(packed + gzip.compress(b"more"), encoding, LIMIT) == body + b"more"
