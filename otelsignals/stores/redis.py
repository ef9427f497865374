"""The Redis reputation store, for several replicas sharing one window.

Per agent: a list ``<prefix>agent:<id>:window`` (entries ``[passed, latency_ms, at]`` as JSON, oldest
first) and a counter ``<prefix>agent:<id>:count``; the set ``<prefix>agents`` lists the agents.
``record`` is one Lua script (Redis runs a script atomically): INCR the count, RPUSH the entry,
LTRIM the list to its newest ``window_size`` entries, SADD the agent, and return the count (the
entry's sequence number). ``window_since`` is one script too: it reads the count and, from it, the
list's entries numbered above the one asked for (the list's last entry is numbered with the count),
hence consistently.

Documents are strings ``<prefix>doc:<kind>:<key>``, indexed per kind in the sorted set
``<prefix>docs:<kind>`` (key scored by its last write); ``prune_documents`` is one Lua script.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import orjson
import redis

from otelsignals.reputation import Evaluation
from otelsignals.stores import DEFAULT_WINDOW, PartlyRecorded

# KEYS: window, count, agents, the evaluation's record marker; ARGV: entry, window size, agent,
# marker lifetime (s). Returns the agent's new count. The keys' types are checked before any write:
# Redis keeps what a failing script wrote before its error, and a count raised for an entry never
# pushed would skew the agent's numbering. The marker (when the evaluation is named, Evaluation.key)
# makes a second run of the script give back the first one's number instead of counting again: a
# request whose answer was lost is sent again (redis-py's retries, the recorder's one-by-one retry),
# and counted each time it used to be (3 evaluations became 6).
RECORD_SCRIPT = """
if KEYS[4] ~= '' then
  local seen = redis.call('GET', KEYS[4])
  if seen then return tonumber(seen) end
end
for i, expected in ipairs({'list', 'string', 'set'}) do
  local found = redis.call('TYPE', KEYS[i]).ok
  if found ~= 'none' and found ~= expected then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. found .. ', not a ' .. expected)
  end
end
local n = redis.call('INCR', KEYS[2])
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
redis.call('SADD', KEYS[3], ARGV[3])
if KEYS[4] ~= '' then redis.call('SET', KEYS[4], n, 'EX', tonumber(ARGV[4])) end
return n
"""
# How long a recorded evaluation's marker stays: retries come within seconds; ~100 bytes each (at
# 1,000 evaluations a second, ~12 MB in Redis).
RECORD_MARKER_SECONDS = 120

# KEYS: window, count; ARGV: numbered above, window size. Returns {count, entries oldest first}.
WINDOW_SINCE_SCRIPT = """
local n = tonumber(redis.call('GET', KEYS[2]) or '0')
local newer = math.min(n - tonumber(ARGV[1]), tonumber(ARGV[2]))
if newer <= 0 then return {n, {}} end
return {n, redis.call('LRANGE', KEYS[1], -newer, -1)}
"""

# KEYS[1]: a kind's index (sorted set: key -> last written); ARGV: document key prefix, cutoff, max count.
PRUNE_SCRIPT = """
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2])
for _, key in ipairs(old) do redis.call('DEL', ARGV[1] .. key) end
if #old > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2]) end
local extra = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[3])
local over = {}
if extra > 0 then
  over = redis.call('ZRANGE', KEYS[1], 0, extra - 1)
  for _, key in ipairs(over) do redis.call('DEL', ARGV[1] .. key) end
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, extra - 1)
end
return {#old, #over}
"""


class RedisStore:
    def __init__(
        self, url: str, *, window_size: int = DEFAULT_WINDOW, prefix: str = "otelsignals:rep:"
    ) -> None:
        self.window_size = window_size
        self.prefix = prefix
        self._client = redis.Redis.from_url(url, socket_timeout=30, socket_connect_timeout=10)
        self._record = self._client.register_script(RECORD_SCRIPT)
        self._window_since = self._client.register_script(WINDOW_SINCE_SCRIPT)
        self._prune = self._client.register_script(PRUNE_SCRIPT)
        self._client.ping()  # fail at start-up, not at the first write, when Redis is unreachable
        self._index_documents()

    def _keys(self, agent_id: str) -> tuple[str, str]:
        base = f"{self.prefix}agent:{agent_id}"
        return f"{base}:window", f"{base}:count"

    def record(self, evaluation: Evaluation) -> None:
        self.record_many([evaluation])

    def record_many(self, evaluations: Sequence[Evaluation]) -> list[int]:
        """One round trip; each evaluation is recorded atomically by the script, and one script's
        error (a key of the wrong type) leaves the others recorded: `PartlyRecorded` says which."""
        with self._client.pipeline(transaction=False) as pipe:
            for evaluation in evaluations:
                window_key, count_key = self._keys(evaluation.agent_id)
                entry = orjson.dumps([int(evaluation.passed), evaluation.latency_ms, evaluation.at])
                marker = f"{self.prefix}recorded:{evaluation.key}" if evaluation.key else ""
                self._record(
                    keys=[window_key, count_key, f"{self.prefix}agents", marker],
                    args=[entry, self.window_size, evaluation.agent_id, RECORD_MARKER_SECONDS],
                    client=pipe,
                )
            replies = pipe.execute(raise_on_error=False)
        errors = [reply for reply in replies if isinstance(reply, Exception)]
        if not errors:
            return [int(number) for number in replies]
        if len(errors) == len(replies):
            raise errors[0]
        raise PartlyRecorded([None if isinstance(r, Exception) else int(r) for r in replies], errors)

    def window(self, agent_id: str) -> tuple[list[Evaluation], int]:
        return self.window_since(agent_id, 0)

    def window_since(self, agent_id: str, after: int) -> tuple[list[Evaluation], int]:
        count, entries = self._window_since(keys=list(self._keys(agent_id)), args=[after, self.window_size])
        window = []
        for raw in entries:
            passed, latency_ms, at = orjson.loads(raw)
            window.append(Evaluation(agent_id, bool(passed), latency_ms, at))
        return window, int(count)

    def agents(self) -> list[str]:
        return sorted(
            m.decode() if isinstance(m, bytes) else m for m in self._client.smembers(f"{self.prefix}agents")
        )

    def save_document(self, kind: str, key: str, body: str, now: float | None = None) -> None:
        with self._client.pipeline(transaction=True) as pipe:
            pipe.set(f"{self.prefix}doc:{kind}:{key}", body)
            pipe.zadd(f"{self.prefix}docs:{kind}", {key: time.time() if now is None else now})
            pipe.execute()

    def prune_documents(
        self, kind: str, max_age: float, max_count: int, now: float | None = None
    ) -> tuple[int, int]:
        cutoff = (time.time() if now is None else now) - max_age
        by_age, by_count = self._prune(
            keys=[f"{self.prefix}docs:{kind}"], args=[f"{self.prefix}doc:{kind}:", repr(cutoff), max_count]
        )
        return int(by_age), int(by_count)

    def _index_documents(self) -> None:
        """Documents written before retention existed get an index entry, dated now."""
        marker = f"{self.prefix}doc:"
        now = time.time()
        for name in self._client.scan_iter(match=f"{marker}*", count=1000):
            text = name.decode() if isinstance(name, bytes) else name
            kind, sep, key = text[len(marker) :].partition(":")
            if sep:
                self._client.zadd(f"{self.prefix}docs:{kind}", {key: now}, nx=True)

    def document_keys(self, kind: str, limit: int) -> list[str]:
        keys = self._client.zrevrange(f"{self.prefix}docs:{kind}", 0, limit - 1)
        return [key.decode() if isinstance(key, bytes) else str(key) for key in keys]

    def load_document(self, kind: str, key: str) -> str | None:
        value = self._client.get(f"{self.prefix}doc:{kind}:{key}")
        return value.decode() if isinstance(value, bytes) else value

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> RedisStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
