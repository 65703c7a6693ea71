"""The Python API on every store: the pattern's three original tests, then
records from generators and dicts, bad input, retries, failures, replace
listings and the ledger."""

import datetime as dt

import pytest

import backfill
from backfill import (
    BackfillError,
    InvalidRecord,
    Job,
    Listing,
    Record,
    Transient,
    sync_one_day,
)

UTC = dt.timezone.utc
JAN = [dt.date(2026, 1, d) for d in range(1, 32)]


def at(day, hour=9):
    return dt.datetime(day.year, day.month, day.day, hour, tzinfo=UTC)


def orders(day, version=1, n=3):
    """A deterministic day of `n` orders."""
    for i in range(n):
        yield Record(
            key=f"order:{day}:{i}",
            event_date=day,
            value={"total": 10 * i + version, "status": "placed"},
            updated_at=at(day, 9 + version),
        )


def fetch(day):
    return orders(day)


def state(store):
    return [(r.key, r.event_date, r.value, r.updated_at, r.deleted) for r in store.rows()]


# The original library's three tests.


def test_the_same_range_synced_twice_leaves_the_store_unchanged(store):
    first = backfill.backfill(store, fetch, JAN[0], JAN[6])
    assert first.totals.inserted == 21
    before = state(store)
    again = backfill.backfill(store, fetch, JAN[0], JAN[6])
    assert again.totals.written == 0
    assert again.totals.unchanged == 21
    assert state(store) == before


def test_a_daily_job_and_a_weekly_backfill_converge(store, tmp_path):
    for day in JAN[:7]:
        sync_one_day(store, fetch, day)
    daily = state(store)
    other = backfill.MemoryStore()
    backfill.backfill(other, fetch, JAN[0], JAN[6])
    assert state(other) == daily


def test_a_stale_write_is_rejected(store):
    day = JAN[0]
    backfill.backfill(store, lambda d: orders(d, version=2), day, day)
    newer = state(store)
    stale = backfill.backfill(store, lambda d: orders(d, version=1), day, day)
    assert stale.totals.stale == 3
    assert stale.totals.written == 0
    assert state(store) == newer


# Records and values.


def test_dicts_iso_strings_and_non_string_values(store):
    def fetch(day):
        return [
            {
                "key": "a",
                "event_date": str(day),
                "value": {"b": 1, "a": [1, 2.5, None]},
                "updated_at": "2026-01-01T10:00:00+01:00",
            },
            {"key": "b", "event_date": day, "value": "kept as it is", "updated_at": at(day)},
        ]

    report = backfill.backfill(store, fetch, JAN[0], JAN[0])
    assert report.totals.inserted == 2
    rows = {r.key: r for r in store.rows()}
    # Canonical JSON: compact, keys sorted; instants in UTC.
    assert rows["a"].value == '{"a":[1,2.5,null],"b":1}'
    assert rows["a"].updated_at == dt.datetime(2026, 1, 1, 9, tzinfo=UTC)
    assert rows["b"].value == "kept as it is"


def test_a_large_generator_is_consumed_in_chunks(store):
    day = JAN[0]
    n = 25_000

    def fetch(d):
        for i in range(n):
            yield Record(f"k{i:06}", d, "v", at(d))

    report = backfill.backfill(store, fetch, day, day)
    assert report.totals.inserted == n
    assert len(store.rows()) == n


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda d: Record("k", d, "v", dt.datetime(2026, 1, 1, 9)), "naive"),
        (lambda d: Record("k\0", d, "v", at(d)), "key"),
        (lambda d: Record("k" * 600, d, "v", at(d)), "key"),
        (lambda d: Record("k", "2026-13-01", "v", at(d)), "event_date"),
        (lambda d: Record("k", d, None, at(d)), "value"),
        (lambda d: Record("k", d, "v", "yesterday"), "updated_at"),
    ],
)
def test_bad_records_raise_invalid_record(make, field):
    with pytest.raises(InvalidRecord) as raised:
        make(JAN[0])
    assert isinstance(raised.value, ValueError)
    assert field in str(raised.value)


def test_a_bad_record_fails_its_day_and_writes_nothing_of_it(store):
    def fetch(day):
        yield Record("good", day, "v", at(day))
        yield {"key": "bad", "event_date": day, "value": "v", "updated_at": "not a time"}

    with pytest.raises(BackfillError) as raised:
        backfill.backfill(store, fetch, JAN[0], JAN[0])
    assert store.rows() == []
    assert "updated_at" in raised.value.report.failed[0][1]


# Failures, retries, the ledger.


def test_a_failing_fetch_reports_its_traceback_and_the_other_days_are_written(store):
    def fetch(day):
        if day == JAN[1]:
            raise RuntimeError(f"upstream returned HTTP 500 for {day}")
        return orders(day)

    with pytest.raises(BackfillError) as raised:
        backfill.backfill(store, fetch, JAN[0], JAN[2])
    report = raised.value.report
    assert [d.day for d in report.days] == [JAN[0], JAN[2]]
    (day, error), = report.failed
    assert day == JAN[1]
    assert "RuntimeError: upstream returned HTTP 500 for 2026-01-02" in error
    assert "Traceback" in error
    status = Job().status(store, JAN[0], JAN[2])
    assert status.days == [(JAN[0], "synced"), (JAN[1], "failed"), (JAN[2], "synced")]
    assert "2026-01-02" in str(status)


def test_transient_errors_are_retried(store):
    calls = []

    def fetch(day):
        calls.append(day)
        if len(calls) < 3:
            raise Transient("rate limited")
        return orders(day)

    job = Job(retries=3, retry_delay=0.01, max_retry_delay=0.02)
    report = job.backfill(store, fetch, JAN[0], JAN[0])
    assert report.days[0].attempts == 3
    assert report.totals.inserted == 3


def test_other_errors_are_not_retried(store):
    calls = []

    def fetch(day):
        calls.append(day)
        raise ValueError("a bug")

    with pytest.raises(BackfillError):
        Job(retries=3, retry_delay=0.01).backfill(store, fetch, JAN[0], JAN[0])
    assert len(calls) == 1


def test_only_missing_runs_just_the_days_not_synced(store):
    backfill.backfill(store, fetch, JAN[0], JAN[1])
    seen = []

    def counting(day):
        seen.append(day)
        return orders(day)

    report = Job(only="missing").backfill(store, counting, JAN[0], JAN[3])
    assert seen == [JAN[2], JAN[3]]
    # What a registry of one's own needs, as the command line's metrics
    # have it: what the run set out to do, what it left, how long it took.
    assert report.planned == [JAN[2], JAN[3]]
    assert report.not_selected == [(JAN[0], "synced"), (JAN[1], "synced")]
    assert (report.stopped, report.dry_run) == (False, False)
    assert dt.timedelta(0) < report.elapsed < dt.timedelta(minutes=1)
    dry = Job(dry_run=True).backfill(store, counting, JAN[4], JAN[4])
    assert dry.dry_run and dry.planned == [JAN[4]] and seen == [JAN[2], JAN[3]]


# Replace listings and tombstones.


def test_a_replace_listing_tombstones_what_it_lacks_and_the_guard_refuses_an_empty_one(store):
    day = JAN[0]
    backfill.backfill(store, fetch, day, day)
    job = Job(mode="replace")
    listing = lambda d: Listing(list(orders(d))[:2], as_of=at(d, 20))  # noqa: E731
    report = job.backfill(store, listing, day, day)
    assert report.totals.deleted == 1
    assert [r.key for r in store.rows()] == [f"order:{day}:0", f"order:{day}:1"]
    with pytest.raises(BackfillError) as raised:
        job.backfill(store, lambda d: Listing([], as_of=at(d, 21)), day, day)
    assert "empty" in raised.value.report.failed[0][1]
    assert len(store.rows()) == 2


def test_a_tombstone_deletes_and_a_stale_redelivery_stays_deleted(store):
    day = JAN[0]
    backfill.backfill(store, fetch, day, day)
    key = f"order:{day}:0"
    gone = lambda d: [Record(key, d, updated_at=at(d, 23), deleted=True)]  # noqa: E731
    assert backfill.backfill(store, gone, day, day).totals.deleted == 1
    assert key not in [r.key for r in store.rows()]
    stale = backfill.backfill(store, fetch, day, day)
    assert key not in [r.key for r in store.rows()]
    assert stale.totals.stale == 1


def test_settings_are_checked_when_the_job_is_made():
    with pytest.raises(ValueError):
        Job(mode="upsert")
    with pytest.raises(ValueError):
        Job(only="some")
    with pytest.raises(ValueError):
        Job(time_zone="Mars/Olympus")


def test_the_original_names_work():
    assert backfill.InMemoryStore is backfill.MemoryStore
    assert backfill.SQLiteStore is backfill.SqliteStore


def test_the_report_prints_the_engines_table(store):
    report = backfill.backfill(store, fetch, JAN[0], JAN[1])
    text = str(report)
    assert "2026-01-01" in text and "inserted" in text


def test_each_day_is_a_line_of_pythons_logging(store, caplog):
    caplog.set_level("INFO", logger="backfill")
    backfill.backfill(store, fetch, JAN[0], JAN[1])
    lines = [r.getMessage() for r in caplog.records if r.name == "backfill"]
    assert lines == [
        "2026-01-01 synced: inserted 3 updated 0 deleted 0 unchanged 0 stale 0 skipped 0 (1 attempt)",
        "2026-01-02 synced: inserted 3 updated 0 deleted 0 unchanged 0 stale 0 skipped 0 (1 attempt)",
    ]


def test_every_event_of_a_run_reaches_the_callback_in_order(store):
    events = []
    calls = []

    def fetch(day):
        calls.append(day)
        if day == JAN[1] and calls.count(day) == 1:
            raise Transient("rate limited")
        if day == JAN[2]:
            raise ValueError("a bug")
        return orders(day)

    job = Job(retries=1, retry_delay=0.01, max_retry_delay=0.01, on_event=events.append)
    with pytest.raises(BackfillError):
        job.backfill(store, fetch, JAN[0], JAN[2])
    assert [(e.kind, e.day, e.attempt) for e in events] == [
        ("run_started", None, None),
        ("day_started", JAN[0], 1),
        ("day_finished", JAN[0], 1),
        ("day_started", JAN[1], 1),
        ("day_retrying", JAN[1], 1),
        ("day_started", JAN[1], 2),
        ("day_finished", JAN[1], 2),
        ("day_started", JAN[2], 1),
        ("day_failed", JAN[2], 1),
        ("run_finished", None, None),
    ]
    started, retrying, finished, failed, done = (
        events[0], events[4], events[6], events[8], events[9])
    assert started.days == JAN[0:3] and started.run_id
    assert "rate limited" in retrying.error and 0 < retrying.delay <= 0.01
    assert finished.day_report.counts.inserted == 3
    assert "ValueError: a bug" in failed.error
    assert done.run_report.totals.inserted == 6
    assert done.run_report.failed[0][0] == JAN[2]
    assert "day_failed" in repr(failed)


def test_a_callback_that_raises_is_logged_and_the_run_goes_on(store, caplog):
    def callback(event):
        raise RuntimeError(f"cannot handle {event.kind}")

    report = Job(on_event=callback).backfill(store, fetch, JAN[0], JAN[1])
    assert report.totals.inserted == 6
    errors = [r.getMessage() for r in caplog.records
              if r.name == "backfill" and r.levelname == "ERROR"]
    assert len(errors) == 6  # run, 2 x (started, finished), run
    assert "RuntimeError: cannot handle run_started" in errors[0]


def test_a_store_that_cannot_be_opened_raises_store_error(tmp_path):
    with pytest.raises(backfill.StoreError) as raised:
        backfill.SqliteStore(str(tmp_path / "no" / "such" / "dir" / "p.db"))
    assert isinstance(raised.value.retryable, bool)
    with pytest.raises(backfill.StoreError) as raised:
        backfill.PostgresStore("postgres://app@127.0.0.1:1/db?connect_timeout=2")
    assert "127.0.0.1" in str(raised.value) or "refused" in str(raised.value).lower()
    with pytest.raises(ValueError):
        backfill.SqliteStore(str(tmp_path / "p.db"), table="Bad Name")


def test_one_day_refused_by_the_guard_raises_replace_refused(store):
    day = JAN[0]
    backfill.backfill(store, fetch, day, day)
    job = Job(mode="replace", max_delete_fraction=0.5)
    with pytest.raises(backfill.ReplaceRefused):
        job.sync_one_day(store, lambda d: Listing(list(orders(d))[:1], as_of=at(d, 20)), day)
    assert len(store.rows()) == 3


def test_replace_refuses_deleting_more_than_half_a_day_by_default(store):
    day = JAN[0]
    backfill.backfill(store, lambda d: orders(d, n=10), day, day)
    # A listing missing 6 of 10 rows: refused unless the job allows it.
    listing = lambda d: Listing(list(orders(d, n=10))[:4], as_of=at(d, 20))  # noqa: E731
    with pytest.raises(backfill.ReplaceRefused, match="50.0%"):
        Job(mode="replace").sync_one_day(store, listing, day)
    assert len(store.rows()) == 10
    report = Job(mode="replace", max_delete_fraction=1.0).sync_one_day(store, listing, day)
    assert report.counts.deleted == 6


def test_a_bad_record_from_sync_one_day_raises_invalid_record(store):
    naive = dt.datetime(2026, 1, 1, 9)
    for bad in [
        {"key": "k", "event_date": JAN[0], "value": "v", "updated_at": naive},
        {"key": "k\0", "event_date": JAN[0], "value": "v", "updated_at": at(JAN[0])},
        {"key": "k", "event_date": JAN[0], "value": float("nan"), "updated_at": at(JAN[0])},
        "not a record",
    ]:
        with pytest.raises(InvalidRecord) as raised:
            sync_one_day(store, lambda d: [bad], JAN[0])
        assert not isinstance(raised.value, backfill.StoreError)
    assert store.rows() == []


def test_status_shows_the_exception_line_of_a_failed_day(store):
    def fetch(day):
        raise RuntimeError("upstream returned HTTP 500")

    with pytest.raises(BackfillError):
        Job(retries=0).backfill(store, fetch, JAN[0], JAN[0])
    line = [l for l in str(Job().status(store, JAN[0], JAN[0])).splitlines() if l.startswith("2026-01-01")][0]
    assert "RuntimeError: upstream returned HTTP 500" in line, line
    assert "Traceback" not in line


def test_sync_one_day_takes_a_partition_key_string(store):
    # Dagster's `context.partition_key` and Airflow's `ds` are "YYYY-MM-DD".
    report = sync_one_day(store, fetch, "2026-01-05")
    assert report.day == dt.date(2026, 1, 5)
    assert report.counts.inserted == 3
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        sync_one_day(store, fetch, "2026-1-5")


def test_dates_and_aware_datetimes_convert_exactly():
    plus = dt.timezone(dt.timedelta(hours=5, minutes=30))
    r = Record("k", dt.date(2026, 3, 9), "v", dt.datetime(2026, 3, 9, 12, 0, 0, 123456, tzinfo=plus))
    assert r.updated_at == dt.datetime(2026, 3, 9, 6, 30, 0, 123456, tzinfo=UTC)
    assert r.event_date == dt.date(2026, 3, 9)
    far = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    assert Record("k", dt.date(9999, 12, 31), "v", far).updated_at == far
    first = dt.datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=UTC)
    assert Record("k", dt.date(1, 1, 1), "v", first).updated_at == first
    assert Record("k", dt.date(1, 1, 1), "v", first).event_date == dt.date(1, 1, 1)

    class NoOffset(dt.tzinfo):
        def utcoffset(self, _):
            return None

    for naive in (dt.datetime(2026, 1, 1), dt.datetime(2026, 1, 1, tzinfo=NoOffset())):
        with pytest.raises(InvalidRecord, match="naive"):
            Record("k", dt.date(2026, 1, 1), "v", naive)
    with pytest.raises(InvalidRecord, match="event_date"):
        Record("k", dt.datetime(2026, 1, 1, tzinfo=UTC), "v", at(JAN[0]))
    with pytest.raises(InvalidRecord, match="event_date"):
        Record("k", 20260101, "v", at(JAN[0]))


@pytest.mark.parametrize("value", [object(), float("nan"), {"a": float("inf")}, {1: {2}}])
def test_a_value_that_is_not_json_is_an_invalid_record(value):
    with pytest.raises(InvalidRecord, match="value"):
        Record("k", JAN[0], value, at(JAN[0]))


def test_hostile_job_settings_are_refused():
    for bad in ({"retry_delay": -1.0}, {"max_retry_delay": float("nan")}, {"day_timeout": -5.0}):
        with pytest.raises(ValueError):
            Job(**bad)
    with pytest.raises((OverflowError, TypeError)):
        Job(retries=-1)
    with pytest.raises(TypeError):
        Job(concurrency="8")
