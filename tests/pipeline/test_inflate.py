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
