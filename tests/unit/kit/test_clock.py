import datetime as dt
import re

from gitea_runner_operator.kit.clock import iso_seconds, utc_now_iso, utc_now_micro


def test_a_status_time_is_utc_to_the_second_with_a_z():
    east = dt.timezone(dt.timedelta(hours=2))
    when = dt.datetime(2026, 3, 1, 12, 30, 5, 987654, tzinfo=east)
    assert iso_seconds(when) == "2026-03-01T10:30:05Z"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", utc_now_iso())


def test_a_lease_time_keeps_microseconds_so_close_renewals_differ():
    stamp = utc_now_micro()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", stamp)
    parsed = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    assert abs(parsed - dt.datetime.now(dt.UTC)) < dt.timedelta(minutes=1)
