"""The embedders: the shipped offline model on real text, and an OpenAI-compatible endpoint
served for real on 127.0.0.1 (a tiny http.server speaking ``POST /v1/embeddings``), reached through
the pipeline's OpenAIEmbeddingsEndpoint as the sidecar does."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import math
import mmap
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from otelsignals.compaction import Outcome, compact
from otelsignals.config import EvalsConfig
from otelsignals.evals import embeddings
from otelsignals.evals.embeddings import (
    Embedder,
    EmbeddingError,
    OpenAIEmbedder,
    StaticEmbedder,
    _hashes,
    _model_root,
    _Vocabulary,
    cosine,
    default_embedder,
    resolved_model_cache_dir,
    tokenize,
    word_hash,
)
from otelsignals.model import Message, Role
from otelsignals.pipeline.analyzer import Analyzer
from otelsignals.pipeline.http_client import Backoff, RetryPolicy
from otelsignals.pipeline.llm_endpoints import OpenAIEmbeddingsEndpoint
from otelsignals.telemetry import Telemetry

# ---------------------------------------------------------------------------------------------
# The shipped model


@pytest.fixture(scope="module")
def static() -> StaticEmbedder:
    return default_embedder()


def test_shipped_model_loads_offline_with_the_documented_shape(static: StaticEmbedder) -> None:
    assert isinstance(static, Embedder)
    assert static.dimension == 50
    vectors = static.embed(["refund my order", "hello world"])
    assert vectors.shape == (2, 50)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert len(static.model.vocab) == 400_000


def test_similar_meaning_is_closer_than_unrelated_text(static: StaticEmbedder) -> None:
    query, paraphrase, unrelated = static.embed(
        ["refund my order", "I want my money back for the purchase", "the weather in Paris"]
    )
    assert cosine(query, paraphrase) > cosine(query, unrelated) + 0.2


def test_empty_and_unknown_text_embed_to_the_zero_vector(static: StaticEmbedder) -> None:
    vectors = static.embed(["", "   ", "qzxqzxqzx", "the weather in Paris"])
    assert vectors.shape == (4, 50)
    assert not vectors[:3].any()
    assert cosine(vectors[0], vectors[3]) == 0.0
    assert static.embed([]).shape == (0, 50)


def test_embed_rejects_a_bare_string_and_non_strings(static: StaticEmbedder) -> None:
    with pytest.raises(TypeError, match="sequence of texts"):
        static.embed("refund my order")
    with pytest.raises(TypeError, match="not str"):
        static.embed(["ok", 3])  # type: ignore[list-item]


def test_batching_does_not_change_the_vectors() -> None:
    texts = [f"order {i} was shipped to customer number {i * 7} yesterday" for i in range(23)]
    texts += ["", "the weather in Paris"]
    one_batch = StaticEmbedder(batch_size=1000, cache_size=0).embed(texts)
    small_batches = StaticEmbedder(batch_size=4, cache_size=0).embed(texts)
    np.testing.assert_allclose(one_batch, small_batches, atol=1e-6)


def test_repeated_texts_are_embedded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    embedder = StaticEmbedder(cache_size=2)
    computed: list[list[str]] = []
    real_compute = embedder._compute

    def counting(texts: list[str]) -> np.ndarray:
        computed.append(list(texts))
        return real_compute(texts)

    monkeypatch.setattr(embedder, "_compute", counting)
    first = embedder.embed(["a cat", "a dog", "a cat"])
    assert computed == [["a cat", "a dog"]]  # duplicates inside one call computed once
    np.testing.assert_array_equal(first[0], first[2])
    again = embedder.embed(["a dog", "a cat"])
    assert computed == [["a cat", "a dog"]]  # both served from the cache
    np.testing.assert_array_equal(again[1], first[0])
    embedder.embed(["a bird"])  # evicts the least recently used ("a dog")
    embedder.embed(["a cat", "a dog"])
    assert computed[-1] == ["a dog"]
    assert len(embedder.cache) == 2
    again[:] = 0  # callers get copies: the cache cannot be corrupted through a result
    assert embedder.embed(["a cat"]).any()


def test_cached_rows_do_not_keep_their_texts(static: StaticEmbedder) -> None:
    # The cache knows a text by its hash: an answer embedded for the session metrics can still be
    # compacted once it is old (compaction.py leaves alone text another object holds).
    answer = "The refund was issued to your card ending 4242; it shows up within five working days. " * 3
    message = Message(Role.ASSISTANT, content=answer[:-1] + answer[-1])  # a string of its own
    static.embed([message.content or ""])
    assert compact(message) is Outcome.COMPACTED
    assert message.content == answer
    assert static.embed([answer]).shape == (1, static.dimension)


def test_max_vocab_keeps_the_most_frequent_words() -> None:
    small = StaticEmbedder(max_vocab=1000)
    assert len(small.model.vocab) == 1000
    vectors = small.embed(["the", "refund"])  # "refund" is ranked ~17 000th
    assert vectors[0].any() and not vectors[1].any()


WORDS = ["the", "refund", "order", "the", "café", "naïve", "ok"]


@pytest.mark.parametrize("frequent", [0, 2, 4, len(WORDS)])  # words in the dict, the rest hashed
@pytest.mark.parametrize(
    ("tokens", "rows"),
    [
        (["refund", "order"], [1, 2]),
        (["the"], [0]),  # listed twice: its first row, as a dict built with setdefault gives
        (["café", "naïve", "ok"], [4, 5, 6]),  # non-ASCII words
        (["refunds", "Refund", "", "qzx"], [-1, -1, -1, -1]),  # near-misses: plural, case, empty
        (["ok", "qzx", "the", "order", "refunds"], [6, -1, 0, 2, -1]),  # mixed, in order
        ([], []),
    ],
)
def test_vocabulary_finds_each_token_s_row(
    frequent: int, tokens: list[str], rows: list[int], tmp_path: Path
) -> None:
    vocabulary = _Vocabulary.of_words(_hashes(WORDS), WORDS[:frequent])
    assert len(vocabulary) == 6  # distinct words
    assert vocabulary.rows_of(tokens) == rows
    # Saved to the model cache and loaded back: the same rows.
    path = tmp_path / "vocabulary.npz"
    path.write_bytes(_saved(vocabulary))
    loaded = _Vocabulary.load(path, len(WORDS), SOURCE)
    assert loaded is not None and loaded[1] == len(WORDS)
    assert loaded[0].rows_of(tokens) == rows


SOURCE = 0xFEED_FACE_CAFE_BEEF  # the hash of the file the words were read from (made up here)


def _saved(vocabulary: _Vocabulary, size: int = len(WORDS), source: int = SOURCE) -> bytes:
    out = io.BytesIO()
    vocabulary.save(out, size, len(WORDS), source)
    return out.getvalue()


def _reversed(values: np.ndarray) -> np.ndarray:
    return values[::-1].copy()


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda a: a, id="control: unchanged, it loads"),
        pytest.param(lambda a: a.update(header=a["header"] + [1, 0, 0]), id="of another size"),
        pytest.param(lambda a: a.update(header=a["header"] + [0, 0, 1]), id="of another file"),
        pytest.param(lambda a: a.pop("rows"), id="an array missing"),
        pytest.param(lambda a: a.update(hashes=_reversed(a["hashes"])), id="hashes out of order"),
        pytest.param(lambda a: a.update(hashes=a["hashes"].astype(np.float64)), id="hashes of another type"),
        pytest.param(
            lambda a: a.update(hashes=a["hashes"].reshape(2, 3), rows=a["rows"].reshape(2, 3)), id="2-d"
        ),
        pytest.param(lambda a: a.update(hashes=np.array(5), rows=np.array(0, dtype=np.int32)), id="0-d"),
        pytest.param(lambda a: a.update(rows=a["rows"][:-1]), id="fewer rows than hashes"),
        pytest.param(lambda a: a["rows"].__setitem__(0, len(WORDS)), id="a row past the table"),
        pytest.param(lambda a: a["rows"].__setitem__(0, -1), id="a negative row"),
        pytest.param(
            lambda a: a.update(frequent_rows=_reversed(a["frequent_rows"])), id="frequent rows shuffled"
        ),
        pytest.param(lambda a: a["frequent_rows"].__setitem__(0, 99), id="a frequent row past the table"),
        pytest.param(
            lambda a: a.update(frequent_rows=a["frequent_rows"][:-1]), id="a frequent word without row"
        ),
    ],
)
def test_a_cached_vocabulary_is_used_only_when_it_is_this_one(
    change: Callable[[dict[str, np.ndarray]], object], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with np.load(io.BytesIO(_saved(_Vocabulary.of_words(_hashes(WORDS), WORDS)))) as saved:
        arrays = {name: saved[name] for name in saved.files}
    change(arrays)
    changed = io.BytesIO()
    np.savez(changed, **arrays)
    path = tmp_path / "vocabulary.npz"
    path.write_bytes(changed.getvalue())
    loaded = _Vocabulary.load(path, len(WORDS), SOURCE)
    if request.node.callspec.id.startswith("control"):
        assert loaded is not None and loaded[0].rows_of(["refund", "ok", "qzx"]) == [1, 6, -1]
    else:
        assert loaded is None


def test_vocabulary_misses_a_token_hashed_past_every_word() -> None:
    # The search lands past the table's end: still a miss, not an IndexError.
    hashes = np.array([word_hash("beyond") - 2, word_hash("beyond") - 1])
    vocabulary = _Vocabulary(hashes, np.array([0, 1], dtype=np.int32), {})
    assert vocabulary.rows_of(["beyond"]) == [-1]


def test_word_hashes_are_the_same_in_every_process_and_tell_the_shipped_words_apart() -> None:
    # The hashed vocabulary is cached on disk: its hash must not be Python's per-process hash().
    probe = "from otelsignals.evals.embeddings import word_hash; print(word_hash('refund'))"
    values = {
        subprocess.run(
            [sys.executable, "-c", probe],
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert values == {str(word_hash("refund"))}
    import pyarrow.parquet as pq

    words = pq.ParquetFile(_model_root() / VOCABULARY).read().column(0).to_pylist()
    assert len(np.unique(_hashes(words))) == len(set(words)) == len(words)  # no two words share one


VECTORS = "glove_6B_50d_emb.npy"
VOCABULARY = "glove_6B_index.parquet"


def test_embeddings_are_the_sif_weighted_sum_of_the_known_words_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reference, as the model was computed before any cache or hashed words: every word read back
    # whole into a plain dict (first row of each word), each row weighted by SIF from the vectors.
    import pyarrow.parquet as pq

    monkeypatch.setattr(embeddings, "_MODELS", {})
    monkeypatch.setattr(embeddings, "FREQUENT_WORDS", 1000)  # most words found by their hash
    embedder = StaticEmbedder(max_vocab=20_000, cache_size=0, batch_size=3, model_cache_dir=tmp_path)
    words = pq.ParquetFile(_model_root() / VOCABULARY).read().column(0).to_pylist()
    vectors = np.load(_model_root() / VECTORS, mmap_mode="r")
    rows: dict[str, int] = {}
    for index, word in enumerate(words[:20_000]):
        rows.setdefault(str(word), index)
    harmonic = math.log(len(words)) + 0.5772156649
    texts = [
        "Your refund for order 4411 was issued yesterday; it isn't visible yet.",
        "qzxqzx",  # no known word
        "",
        "Café naïve déjà-vu, the 'quoted' words — and emoji 🙂 too",
        "the the the",
        "Reconciliation of the ledger's amortization schedule failed validation",  # rarer words
    ]
    expected = np.zeros((len(texts), 50), dtype=np.float32)
    hashed = 0  # tokens found by their hash, not in the dict
    for i, text in enumerate(texts):
        known = [rows[token] for token in tokenize(text) if token in rows]
        hashed += sum(row >= 1000 for row in known)
        if known:
            weights = (1e-3 / (1e-3 + 1.0 / ((np.array(known) + 1.0) * harmonic))).astype(np.float32)
            weighted = np.asarray(vectors[known], dtype=np.float32) * weights[:, None]
            expected[i] = np.add.reduceat(weighted, [0], axis=0)[0]
    assert hashed >= 5
    norms = np.linalg.norm(expected, axis=1, keepdims=True)  # by rows: as the embedder divides
    expected = np.divide(expected, norms, out=expected, where=norms > 0)
    np.testing.assert_array_equal(embedder.embed(texts), expected)


def _load_afresh(monkeypatch: pytest.MonkeyPatch, cache: Path | None, root: Path | None = None) -> np.ndarray:
    """The weighted table of a 5,000-word model loaded as a new process would, with ``cache``."""
    monkeypatch.setattr(embeddings, "_MODELS", {})
    return embeddings._load_static_model(root or _model_root(), 5000, cache).table


def _is_mapped(table: np.ndarray) -> bool:
    return isinstance(table.base, mmap.mmap) or isinstance(getattr(table.base, "base", None), mmap.mmap)


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    """The embeddings module's warnings (a handler of its own: the CLI's logging setup, run by other
    tests in this process, stops otelsignals' records from reaching pytest's caplog)."""
    records: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    embeddings.log.addHandler(handler)
    yield records
    embeddings.log.removeHandler(handler)


def test_the_weighted_table_is_mapped_from_the_model_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warnings: list[str]
) -> None:
    (tmp_path / "a-file").write_text("")
    in_memory = _load_afresh(monkeypatch, tmp_path / "a-file" / "cache")  # cannot be created
    assert not _is_mapped(in_memory)
    assert len(warnings) == 1 and "cannot write the cache" in warnings[0]
    assert "evals.model_cache_dir" in warnings[0] and "(1 MiB)" in warnings[0]
    assert not _is_mapped(_load_afresh(monkeypatch, None))  # no home directory: in memory too

    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "glove-6b-50d-sif-v1-5000-0.1-1.npy").write_bytes(b"")  # another install's
    other_size = cache / "glove-6b-50d-sif-v1-400000-0.1-1.npy"  # another process's, still in use
    other_size.write_bytes(b"")
    written = _load_afresh(monkeypatch, cache)
    assert _is_mapped(written)
    np.testing.assert_array_equal(written, in_memory)
    (path,) = cache.glob("*sif-v1-5000*")  # the other install's and the partial file are gone
    assert path.name.startswith("glove-6b-50d-sif-v1-5000-") and other_size.exists()
    (vocabulary,) = cache.glob("glove-6b-50d-vocab-v1-5000-*.npz")
    assert sorted(p.name for p in cache.iterdir()) == sorted([path.name, other_size.name, vocabulary.name])
    assert path.stat().st_mode & 0o777 == 0o644  # readable by a runtime user other than the builder
    written_at = path.stat().st_mtime_ns

    again = _load_afresh(monkeypatch, cache)
    assert _is_mapped(again) and path.stat().st_mtime_ns == written_at  # read, not rewritten
    np.testing.assert_array_equal(again, in_memory)

    for wrong in (np.zeros((3, 50)), np.zeros((5000, 50))):  # another shape; zeroed by a crash
        path.unlink()  # a new file: the tables mapped above keep theirs
        np.save(path, wrong.astype(np.float32))
        rebuilt = _load_afresh(monkeypatch, cache)
        assert _is_mapped(rebuilt)
        np.testing.assert_array_equal(rebuilt, in_memory)


LOAD_IN_A_NEW_PROCESS = """
import sys
from otelsignals.evals.embeddings import StaticEmbedder
rows = StaticEmbedder(max_vocab=5000, model_cache_dir=sys.argv[1]).embed(sys.argv[2:])
print("pyarrow" in sys.modules, rows.tobytes().hex())
"""


def test_the_vocabulary_is_read_from_the_model_cache_without_pyarrow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = ["Your refund was issued yesterday", "reconciliation of the ledger failed", "qzx"]

    def in_a_new_process() -> tuple[str, str]:
        run = [sys.executable, "-c", LOAD_IN_A_NEW_PROCESS, str(tmp_path), *texts]
        used_pyarrow, rows = subprocess.run(run, check=True, capture_output=True, text=True).stdout.split()
        return used_pyarrow, rows

    monkeypatch.setattr(embeddings, "_MODELS", {})
    expected = StaticEmbedder(max_vocab=5000, model_cache_dir=tmp_path).embed(texts).tobytes().hex()
    (vocabulary,) = tmp_path.glob("glove-6b-50d-vocab-v1-5000-*.npz")
    assert in_a_new_process() == ("False", expected)  # the vocabulary from the cache: no Parquet read

    another_model = _saved(_Vocabulary.of_words(_hashes(WORDS), WORDS), size=5000)  # of other words
    damaged_files = [b"", vocabulary.read_bytes()[:-100], b"PK" + bytes(200), another_model]
    for damaged in damaged_files:  # empty, cut short, not a zip, another model's
        vocabulary.write_bytes(damaged)
        assert in_a_new_process() == ("True", expected)  # read from the model's files again
        assert vocabulary.read_bytes() != damaged  # and cached again


def test_the_cached_table_survives_a_new_file_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Image layers keep whole seconds of a file's time, and builds may rewrite it: the table built
    # into an image must still be the one found.
    model = tmp_path / "model"
    model.mkdir()
    for name in (VECTORS, VOCABULARY):
        shutil.copyfile(_model_root() / name, model / name)
    cache = tmp_path / "cache"
    _load_afresh(monkeypatch, cache, model)
    (path,) = cache.glob("*.npy")
    written_at = path.stat().st_mtime_ns
    os.utime(model / VECTORS, (1_000_000_000, 1_000_000_000))
    assert _is_mapped(_load_afresh(monkeypatch, cache, model))
    assert path.stat().st_mtime_ns == written_at and list(cache.glob("*.npy")) == [path]


def test_model_cache_directory_follows_the_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert resolved_model_cache_dir() == tmp_path / "xdg" / "otelsignals"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # ignored, as the XDG spec says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolved_model_cache_dir() == tmp_path / "home" / ".cache" / "otelsignals"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert resolved_model_cache_dir() == tmp_path / "home" / ".cache" / "otelsignals"
    assert resolved_model_cache_dir(tmp_path / "mine") == tmp_path / "mine"
    assert resolved_model_cache_dir("~/mine") == tmp_path / "home" / "mine"


def test_tokenizer_follows_glove_conventions() -> None:
    assert tokenize("I don't think it's 'fine', Paris's") == [
        "i", "do", "n't", "think", "it", "'s", "'", "fine", "'", ",", "paris", "'s",
    ]  # fmt: skip


def test_cosine_edge_cases() -> None:
    assert cosine(np.array([1.0, 0.0]), np.array([2.0, 0.0])) == pytest.approx(1.0)
    assert cosine(np.array([1.0, 0.0]), np.array([-3.0, 0.0])) == pytest.approx(-1.0)
    assert cosine(np.array([1.0, 0.0]), np.array([0.0, 1.0])) == pytest.approx(0.0)
    assert cosine(np.zeros(3), np.ones(3)) == 0.0
    assert cosine(np.array([1.3e154, 1.3e154]), np.ones(2)) == 0.0  # squares summed past the float range
    with pytest.raises(ValueError, match="different sizes"):
        cosine(np.ones(2), np.ones(3))


def test_cosine_sums_are_correctly_rounded_whatever_order_a_machine_adds_in() -> None:
    """Exact sums, rounded once: a BLAS kernel's order of addition (np.dot's) moved the last digits
    of the agent metrics from one machine to another."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        a, b = (rng.standard_normal(50).astype(np.float32) for _ in range(2))
        aa, bb, ab = (
            float(sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(p, q, strict=True)))
            for p, q in ((a, a), (b, b), (a, b))
        )
        assert cosine(a, b) == min(1.0, max(-1.0, ab / math.sqrt(aa * bb)))


# ---------------------------------------------------------------------------------------------
# An OpenAI-compatible endpoint on 127.0.0.1

DIM = 8


def fake_vector(text: str) -> list[float]:
    """Deterministic, unnormalised: the server must not be trusted to normalise."""
    digest = hashlib.sha256(text.encode()).digest()
    return [(byte - 128) / 10.0 for byte in digest[:DIM]]


class _Handler(BaseHTTPRequestHandler):
    # What the test wants the next answers to be, and what the server saw.
    mode: ClassVar[str] = "ok"
    seen: ClassVar[list[dict[str, Any]]] = []

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.seen.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        if self.path != "/v1/embeddings":
            return self._send(404, {"error": {"message": "not found"}})
        mode = _Handler.mode
        if mode == "error500":
            return self._send(500, {"error": {"message": "model overloaded"}})
        if mode == "slow":
            time.sleep(1.0)
        if mode == "garbage":
            return self._send_raw(200, b"<html>not json</html>")
        inputs = body["input"]
        data = [
            {"object": "embedding", "index": i, "embedding": fake_vector(text)}
            for i, text in enumerate(inputs)
        ]
        if mode == "short":
            data = data[:-1]
        data.reverse()  # answers may come in any order: the client sorts by index
        self._send(200, {"object": "list", "data": data, "model": body["model"], "usage": {}})

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        self._send_raw(status, json.dumps(payload).encode())

    def _send_raw(self, status: int, raw: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # client gave up (timeout test)
            self.wfile.write(raw)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture(autouse=True)
def reset_server() -> None:
    _Handler.mode = "ok"
    _Handler.seen = []


# Two attempts, 10 ms apart: the retry is exercised without slowing the tests down.
QUICK_RETRY = RetryPolicy(2, Backoff(0.01, 2.0, 0.05, 0.5))
MakeEndpoint = Callable[..., OpenAIEmbeddingsEndpoint]


@pytest.fixture
def endpoint(server: str) -> Iterator[MakeEndpoint]:
    """Makes endpoints (default: the test server, 5 s timeout) and closes them after the test."""
    made: list[OpenAIEmbeddingsEndpoint] = []

    def make(base_url: str = server, api_key: str = "", timeout: float = 5.0) -> OpenAIEmbeddingsEndpoint:
        made.append(OpenAIEmbeddingsEndpoint(base_url, api_key, timeout=timeout, retry=QUICK_RETRY))
        return made[-1]

    yield make
    for opened in made:
        opened.close()


def test_openai_embedder_batches_and_normalises(endpoint: MakeEndpoint) -> None:
    embedder = OpenAIEmbedder(endpoint(api_key="sk-test"), "text-embedding-3-small", batch_size=3)
    texts = [f"message {i}" for i in range(7)]
    vectors = embedder.embed(texts)
    assert vectors.shape == (7, DIM)
    assert [len(req["body"]["input"]) for req in _Handler.seen] == [3, 3, 1]
    assert all(req["path"] == "/v1/embeddings" for req in _Handler.seen)
    assert all(req["body"]["model"] == "text-embedding-3-small" for req in _Handler.seen)
    assert all(req["auth"] == "Bearer sk-test" for req in _Handler.seen)
    for text, vector in zip(texts, vectors, strict=True):
        expected = np.array(fake_vector(text))
        assert cosine(vector, expected) == pytest.approx(1.0, abs=1e-6)  # right row for each text
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.dimension == DIM
    assert isinstance(embedder, Embedder)


def test_openai_embedder_caches_per_text(endpoint: MakeEndpoint) -> None:
    embedder = OpenAIEmbedder(endpoint(), "m", batch_size=10)
    embedder.embed(["a", "b", "a"])
    embedder.embed(["b", "a", "c"])
    assert [req["body"]["input"] for req in _Handler.seen] == [["a", "b"], ["c"]]
    assert _Handler.seen[0]["auth"] is None
    assert embedder.requests == 2


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/", "/v1/embeddings"])
def test_openai_embedder_accepts_any_base_url_form(server: str, endpoint: MakeEndpoint, suffix: str) -> None:
    embedder = OpenAIEmbedder(endpoint(server + suffix), "m")
    assert embedder.embed(["x"]).shape == (1, DIM)
    assert _Handler.seen[-1]["path"] == "/v1/embeddings"


def test_dimension_is_probed_when_unknown(endpoint: MakeEndpoint) -> None:
    embedder = OpenAIEmbedder(endpoint(), "m")
    assert embedder.dimension == DIM
    assert embedder.embed([]).shape == (0, DIM)
    assert OpenAIEmbedder(endpoint(), "m", dimension=DIM).embed([]).shape == (0, DIM)
    assert len(_Handler.seen) == 1


def test_http_500_raises_a_clear_error(endpoint: MakeEndpoint) -> None:
    _Handler.mode = "error500"
    embedder = OpenAIEmbedder(endpoint(), "m")
    with pytest.raises(EmbeddingError, match=r"/v1/embeddings answered HTTP 500.*model overloaded"):
        embedder.embed(["hello"])
    assert len(_Handler.seen) == 2  # a 5xx is retried once (QUICK_RETRY), then reported
    assert len(embedder.cache) == 0  # nothing cached from a failure
    _Handler.mode = "ok"
    assert embedder.embed(["hello"]).shape == (1, DIM)


@pytest.mark.parametrize(
    ("mode", "message"),
    [("garbage", "malformed answer"), ("short", r"sent 1 vector\(s\) of shape \(8,\) for 2 input")],
)
def test_malformed_answers_raise(endpoint: MakeEndpoint, mode: str, message: str) -> None:
    _Handler.mode = mode
    with pytest.raises(EmbeddingError, match=message):
        OpenAIEmbedder(endpoint(), "m").embed(["a", "b"])


def test_timeout_and_unreachable_raise(endpoint: MakeEndpoint) -> None:
    _Handler.mode = "slow"
    with pytest.raises(EmbeddingError, match=r"unreachable: timed out after 0\.2s"):
        OpenAIEmbedder(endpoint(timeout=0.2), "m").embed(["a"])
    with pytest.raises(EmbeddingError, match="unreachable"):
        OpenAIEmbedder(endpoint("http://127.0.0.1:9", timeout=2), "m").embed(["a"])


def test_openai_embedder_validates_its_arguments(endpoint: MakeEndpoint) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        OpenAIEmbedder(endpoint("http://127.0.0.1:1"), "m", batch_size=0)
    with pytest.raises(ValueError, match="timeout"):
        OpenAIEmbeddingsEndpoint("http://127.0.0.1:1", timeout=0)


def test_the_analyzer_closes_its_remote_embeddings_endpoint(server: str) -> None:
    """The endpoint runs its requests on a thread of its own: stopping the pipeline ends it."""
    before = {thread.ident for thread in threading.enumerate()}
    analyzer = Analyzer(Telemetry(), evals=EvalsConfig(embeddings_url=server, embeddings_model="m"))
    assert analyzer.embedder is not None
    analyzer.embedder.embed(["hello"])
    # The endpoint's thread by its name: a thread something else starts meanwhile (a previous
    # test's pool) is not the analyzer's to end.
    started = [t for t in threading.enumerate() if t.ident not in before and t.name == "embeddings-http"]
    assert started, "the endpoint's request thread"
    analyzer.close()
    assert not any(thread.is_alive() for thread in started)
    analyzer.close()  # twice is harmless


def test_rare_tokens_are_remembered_with_their_rows_and_the_memory_stays_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(embeddings, "RARE_TOKENS_KEPT", 3)
    vocabulary = _Vocabulary.of_words(_hashes(WORDS), WORDS[:2])  # "the", "refund" in the dict
    searched: list[list[str]] = []
    search = _Vocabulary._rows_by_hash

    def counted(self: _Vocabulary, tokens: list[str]) -> list[int]:
        searched.append(list(tokens))
        return search(self, tokens)

    monkeypatch.setattr(_Vocabulary, "_rows_by_hash", counted)
    assert vocabulary.rows_of(["order", "qzx", "the"]) == [2, -1, 0]
    # Found again without a search, a miss as well as a word; the frequent word never searched.
    assert vocabulary.rows_of(["qzx", "order", "refund"]) == [-1, 2, 1]
    assert searched == [["order", "qzx"]]
    # Past the bound, all forgotten at once: then searched again, with the right rows.
    assert vocabulary.rows_of(["café", "naïve", "ok"]) == [4, 5, 6]
    assert vocabulary.rows_of(["order", "ok"]) == [2, 6]
    assert searched[1:] == [["café", "naïve", "ok"], ["order"]]
    # One call with more new tokens than the bound keeps no more than the bound; a token repeated
    # in a call is searched once.
    assert vocabulary.rows_of([f"unknown{n}" for n in range(10)] + ["unknown1"]) == [-1] * 11
    assert len(vocabulary._rare) == 3 and searched[-1] == [f"unknown{n}" for n in range(10)]
    # A token longer than RARE_TOKEN_MAX_CHARS is searched every time, never kept.
    vocabulary._rare.clear()
    long = "x" * (embeddings.RARE_TOKEN_MAX_CHARS + 1)
    assert vocabulary.rows_of([long, "order"]) == [-1, 2]
    assert vocabulary._rare == {"order": 2}
