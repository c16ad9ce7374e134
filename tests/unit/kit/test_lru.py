import pytest

from gitea_runner_operator.kit.lru import LRU


def test_the_least_recently_used_key_goes_first_past_the_bound():
    lru: LRU[str, int] = LRU(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # a use: "b" is now the least recently used
    lru.put("c", 3)
    assert list(lru) == ["a", "c"] and len(lru) == 2
    assert "b" not in lru and lru.get("b") is None


def test_a_peek_or_a_replace_keeps_no_key_alive():
    lru: LRU[str, int] = LRU(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.peek("a") == 1
    lru.replace("a", 10)
    lru.put("c", 3)
    assert list(lru) == ["b", "c"]
    with pytest.raises(KeyError):
        lru.replace("a", 1)


def test_an_age_limit_on_top_reads_the_oldest_first():
    lru: LRU[int, float] = LRU(10)
    for job, at in ((1, 0.0), (2, 5.0), (3, 9.0)):
        lru.put(job, at)
    while lru and (oldest := lru.oldest()) is not None and oldest < 6.0:
        lru.drop_oldest()
    assert list(lru) == [3]
    assert lru.pop(3) == 9.0 and lru.oldest() is None and len(lru) == 0
    nothing: LRU[str, int] = LRU(0)
    nothing.put("a", 1)
    assert len(nothing) == 0
    with pytest.raises(ValueError):
        LRU(-1)
