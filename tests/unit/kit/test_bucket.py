import pytest

from gitea_runner_operator.kit.bucket import Bucket


def test_a_full_bucket_lets_a_burst_through_then_one_per_interval():
    bucket = Bucket(rate=2.0, burst=3, now=0.0)
    assert [bucket.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert not bucket.take(0.4)  # 0.8 of a token
    assert bucket.take(0.5)
    assert bucket.level(100.0) == 3.0  # never more than the burst saved up


def test_a_level_read_spends_and_counts_in_nothing():
    bucket = Bucket(rate=1.0, burst=5, now=0.0, tokens=0.0)
    assert bucket.level(2.0) == pytest.approx(2.0)
    assert (bucket.tokens, bucket.at) == (0.0, 0.0)


def test_a_debt_is_waited_out_before_the_next_token():
    bucket = Bucket(rate=10.0, burst=1, now=0.0, tokens=-10.0)  # paused for a second
    assert not bucket.take(1.0)
    assert bucket.take(1.1)


def test_a_reservation_goes_at_once_while_tokens_last_then_waits_its_turn():
    bucket = Bucket(rate=10.0, burst=2, now=0.0)
    assert [bucket.reserve(0.0) for _ in range(5)] == pytest.approx([0.0, 0.0, 0.1, 0.2, 0.3])
    assert bucket.reserve(10.0) == 0.0  # a quiet spell pays the debt and refills
