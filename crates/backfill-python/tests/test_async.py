"""`async def` fetches: a coroutine returning records, an async generator,
a listing, errors and retries, and days in flight overlapping their
awaits."""

import asyncio
import datetime as dt
import time

import pytest

import backfill
from backfill import BackfillError, Job, Listing, Record, Transient

UTC = dt.timezone.utc
DAYS = [dt.date(2026, 3, 1) + dt.timedelta(days=i) for i in range(40)]


def at(day, hour=9):
    return dt.datetime(day.year, day.month, day.day, hour, tzinfo=UTC)


def test_a_coroutine_fetch_and_an_async_generator_store_the_same_rows(store, tmp_path):
    async def coroutine(day):
        await asyncio.sleep(0)
        return [Record(f"o:{day}:{i}", day, {"i": i}, at(day)) for i in range(3)]

    async def generator(day):
        for i in range(3):
            await asyncio.sleep(0)
            yield {"key": f"o:{day}:{i}", "event_date": day, "value": {"i": i},
                   "updated_at": at(day)}

    report = backfill.backfill(store, coroutine, DAYS[0], DAYS[2])
    assert report.totals.inserted == 9
    again = backfill.backfill(store, generator, DAYS[0], DAYS[2])
    assert (again.totals.inserted, again.totals.unchanged) == (0, 9)


def test_an_async_generator_larger_than_a_chunk_is_read_in_chunks(store):
    n = 25_000

    async def fetch(day):
        for i in range(n):
            if i % 5000 == 0:
                await asyncio.sleep(0)
            yield Record(f"k{i:06}", day, "v", at(day))

    report = backfill.backfill(store, fetch, DAYS[0], DAYS[0])
    assert report.totals.inserted == n
    assert len(store.rows()) == n


def test_an_async_listing_tombstones_what_it_lacks(store):
    backfill.backfill(store, lambda d: [Record("a", d, "1", at(d)), Record("b", d, "1", at(d))],
                      DAYS[0], DAYS[0])

    async def listing(day):
        async def records():
            yield Record("a", day, "1", at(day))
        return Listing(records(), as_of=at(day, 12))

    report = Job(mode="replace").backfill(store, listing, DAYS[0], DAYS[0])
    assert report.totals.deleted == 1
    assert [r.key for r in store.rows()] == ["a"]


def test_async_errors_fail_the_day_and_transient_ones_are_retried(store):
    calls = []

    async def flaky(day):
        calls.append(day)
        if len(calls) == 1:
            raise Transient("503")
        return [Record(f"k:{day}", day, "v", at(day))]

    report = Job(retries=2, retry_delay=0.01).backfill(store, flaky, DAYS[0], DAYS[0])
    assert report.days[0].attempts == 2

    async def broken(day):
        yield Record(f"k:{day}", day, "v", at(day))
        raise RuntimeError("the upstream hung up")

    with pytest.raises(BackfillError) as raised:
        backfill.backfill(store, broken, DAYS[1], DAYS[1])
    assert "RuntimeError: the upstream hung up" in raised.value.report.failed[0][1]
    assert [r.key for r in store.rows()] == [f"k:{DAYS[0]}"]


def test_sleeping_async_fetches_overlap_at_concurrency_8():
    async def slow(day):
        await asyncio.sleep(0.1)
        return [Record(f"c:{day}", day, "v", at(day))]

    timings = {}
    for n in (1, 8):
        started = time.monotonic()
        report = Job(concurrency=n).backfill(backfill.MemoryStore(), slow, DAYS[0], DAYS[-1])
        timings[n] = time.monotonic() - started
        assert report.totals.inserted == len(DAYS)
    assert timings[1] / timings[8] >= 0.7 * 8, timings
