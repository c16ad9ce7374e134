"""kit/ttlcache.py: the one TTL memo (Secrets, ConfigMaps, webhook secrets, forge flavours)."""

from gitea_runner_operator.kit.ttlcache import TTLCache


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_answer_is_trusted_for_its_ttl_and_then_only_as_a_last_resort():
    clock = Clock()
    cache: TTLCache[str, bytes | None] = TTLCache(60.0, max_entries=10, clock=clock)
    cache.put("a", b"v")
    cache.put("gone", None, ttl=5.0)  # a negative answer, kept shorter
    clock.now = 4.9
    assert cache.get("a") == b"v" and cache.entry("gone") is not None
    clock.now = 5.0
    assert cache.entry("gone") is None and cache.get("a") == b"v"
    clock.now = 60.0
    assert cache.get("a") is None
    last = cache.peek("a")
    assert last is not None and last.value == b"v"


def test_a_full_cache_drops_expired_answers_first_then_the_oldest():
    clock = Clock()
    cache: TTLCache[str, int] = TTLCache(10.0, max_entries=3, clock=clock)
    cache.put("old", 1)
    cache.put("short", 2, ttl=1.0)
    cache.put("new", 3)
    clock.now = 2.0
    cache.put("newer", 4)  # "short" has expired: it goes, "old" stays
    assert sorted(cache) == ["new", "newer", "old"]
    cache.put("newest", 5)  # nothing expired: the oldest goes
    assert sorted(cache) == ["new", "newer", "newest"]
    cache.put("new", 6)  # re-stored: now the youngest
    cache.put("last", 7)
    assert sorted(cache) == ["last", "new", "newest"]


def test_the_byte_bound_holds_and_a_value_larger_than_it_is_not_kept():
    cache: TTLCache[str, str] = TTLCache(10.0, max_entries=100, max_bytes=100, clock=Clock())
    assert cache.put("a", "x", size=60) and cache.put("b", "y", size=30)
    assert cache.bytes == 90
    assert cache.put("c", "z", size=30)  # "a" goes to make room
    assert sorted(cache) == ["b", "c"] and cache.bytes == 60
    assert not cache.put("b", "huge", size=101)
    assert cache.get("b") is None and cache.bytes == 30


def test_retain_forgets_the_keys_no_longer_in_use():
    cache: TTLCache[tuple[str, str], int] = TTLCache(10.0, max_entries=10, clock=Clock())
    cache.put(("team-a", "s"), 1, size=5)
    cache.put(("team-b", "s"), 2, size=7)
    cache.retain(lambda key: key[0] == "team-b")
    assert list(cache) == [("team-b", "s")] and cache.bytes == 7


def test_reads_sweep_expired_answers_so_memory_follows_the_keys_in_use():
    clock = Clock()
    cache: TTLCache[str, int] = TTLCache(1.0, max_entries=100, sweep_every=5.0, clock=clock)
    for i in range(50):
        cache.put(str(i), i)
    clock.now = 5.0
    assert cache.get("other") is None
    assert len(cache) == 0
