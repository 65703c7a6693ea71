"""Type stubs of the extension module (re-exported by ``backfill``)."""

import datetime as dt
from typing import Any, AsyncIterable, Awaitable, Callable, Iterable, Mapping, Optional, Union

from backfill._lineage import OpenLineage

_Date = Union[dt.date, str]
_Instant = Union[dt.datetime, str]
_Item = Union["Record", Mapping[str, Any]]
_Records = Union[Iterable[_Item], AsyncIterable[_Item], "Listing"]
Fetch = Callable[[dt.date], Union[_Records, Awaitable[_Records]]]
"""A fetch: a function of a day returning (or yielding) its records, a
``Listing``, or, ``async def``, a coroutine of either or an async generator."""

class BackfillError(Exception):
    report: RunReport

class InvalidRecord(ValueError): ...

class StoreError(Exception):
    retryable: bool

class Transient(Exception): ...

class ReplaceRefused(Exception): ...

class Record:
    def __init__(
        self,
        key: str,
        event_date: _Date,
        value: Any = None,
        updated_at: Optional[_Instant] = None,
        deleted: bool = False,
    ) -> None: ...
    @property
    def key(self) -> str: ...
    @property
    def event_date(self) -> dt.date: ...
    @property
    def value(self) -> str: ...
    @property
    def updated_at(self) -> dt.datetime: ...
    @property
    def deleted(self) -> bool: ...

class Listing:
    def __init__(self, records: Union[Iterable[_Item], AsyncIterable[_Item]], as_of: _Instant) -> None: ...

class HistoryRow:
    """A version of a key and the instants it was valid between."""
    @property
    def key(self) -> str: ...
    @property
    def event_date(self) -> dt.date: ...
    @property
    def value(self) -> str: ...
    @property
    def updated_at(self) -> dt.datetime: ...
    @property
    def deleted(self) -> bool: ...
    @property
    def valid_from(self) -> dt.datetime: ...
    @property
    def valid_to(self) -> Optional[dt.datetime]: ...
    @property
    def record(self) -> Record: ...

class MemoryStore:
    def __init__(self, history: bool = False) -> None: ...
    def rows(self) -> list[Record]: ...
    def as_of(self, instant: _Instant) -> list[Record]: ...
    def history(self) -> list[HistoryRow]: ...
    def accept(self, day: _Date, undo: bool = False) -> None: ...

class SqliteStore:
    def __init__(
        self,
        path: str,
        table: Optional[str] = None,
        columns: Optional[list[str]] = None,
        allow_column_changes: bool = False,
        history: bool = False,
    ) -> None: ...
    def rows(self) -> list[Record]: ...
    def as_of(self, instant: _Instant) -> list[Record]: ...
    def history(self) -> list[HistoryRow]: ...
    def accept(self, day: _Date, undo: bool = False) -> None: ...

class PostgresStore:
    def __init__(
        self,
        url: str,
        schema: Optional[str] = None,
        table: Optional[str] = None,
        columns: Optional[list[str]] = None,
        allow_column_changes: bool = False,
        history: bool = False,
    ) -> None: ...
    def rows(self) -> list[Record]: ...
    def as_of(self, instant: _Instant) -> list[Record]: ...
    def history(self) -> list[HistoryRow]: ...
    def accept(self, day: _Date, undo: bool = False) -> None: ...

class DeltaStore:
    def __init__(
        self,
        uri: str,
        storage_options: Optional[dict[str, str]] = None,
        columns: Optional[list[str]] = None,
        allow_column_changes: bool = False,
        history: bool = False,
    ) -> None: ...
    def rows(self) -> list[Record]: ...
    def as_of(self, instant: _Instant) -> list[Record]: ...
    def history(self) -> list[HistoryRow]: ...
    def accept(self, day: _Date, undo: bool = False) -> None: ...
    def version(self) -> int: ...
    @property
    def location(self) -> str: ...

Store = Union[MemoryStore, SqliteStore, PostgresStore, DeltaStore]

class Counts:
    inserted: int
    updated: int
    deleted: int
    unchanged: int
    stale: int
    collapsed: int
    skipped: int
    @property
    def written(self) -> int: ...

class DayReport:
    day: dt.date
    counts: Counts
    attempts: int
    flag: Optional[str]
    """Why a per-day check flagged the day (it was written: the check
    warns), or ``None``."""

class RunReport:
    @property
    def days(self) -> list[DayReport]: ...
    @property
    def failed(self) -> list[tuple[dt.date, str]]: ...
    @property
    def skipped(self) -> list[dt.date]: ...
    @property
    def totals(self) -> Counts: ...
    @property
    def run_id(self) -> Optional[str]: ...
    @property
    def planned(self) -> list[dt.date]: ...
    @property
    def not_selected(self) -> list[tuple[dt.date, str]]: ...
    @property
    def stopped(self) -> bool: ...
    @property
    def dry_run(self) -> bool: ...
    @property
    def elapsed(self) -> dt.timedelta: ...

class Status:
    @property
    def days(self) -> list[tuple[dt.date, str]]: ...
    @property
    def flagged(self) -> list[tuple[dt.date, str]]: ...
    @property
    def accepted(self) -> list[dt.date]: ...
    @property
    def timings(self) -> list[tuple[dt.date, dt.timedelta, dt.timedelta]]: ...

class Event:
    """One event of a run, as a job's ``on_event`` callback receives it."""

    kind: str
    """``"run_started"``, ``"day_started"``, ``"day_retrying"``, ``"day_finished"``,
    ``"day_failed"`` or ``"run_finished"``."""
    day: Optional[dt.date]
    attempt: Optional[int]
    error: Optional[str]
    delay: Optional[float]
    run_id: Optional[str]
    days: Optional[list[dt.date]]
    day_report: Optional[DayReport]
    run_report: Optional[RunReport]

class Job:
    def __init__(
        self,
        *,
        concurrency: Optional[int] = None,
        retries: Optional[int] = None,
        retry_delay: Optional[float] = None,
        max_retry_delay: Optional[float] = None,
        mode: Optional[str] = None,
        allow_empty_replace: Optional[bool] = None,
        max_delete_fraction: Optional[float] = None,
        only: str = "all",
        skip_unchanged: Optional[bool] = None,
        time_zone: Optional[str] = None,
        fail_fast: Optional[bool] = None,
        day_timeout: Optional[float] = None,
        dry_run: bool = False,
        run_id: Optional[str] = None,
        stream_memory: Optional[int] = None,
        lenient_event_dates: Optional[bool] = None,
        check_volume: Optional[str] = None,
        check_empty: Optional[str] = None,
        check_fraction: Optional[float] = None,
        check_window: Optional[int] = None,
        on_event: Optional[Callable[[Event], object]] = None,
        lineage: Optional[OpenLineage] = None,
    ) -> None: ...
    @staticmethod
    def from_config(
        path: Optional[str] = None, profile: Optional[str] = None, **overrides: Any
    ) -> Job: ...
    def backfill(self, store: Store, fetch: Fetch, start: dt.date, end: dt.date) -> RunReport: ...
    def sync_with_lookback(self, store: Store, fetch: Fetch, lookback: int = 1) -> RunReport: ...
    def sync_one_day(
        self, store: Store, fetch: Fetch, target_date: Optional[_Date] = None
    ) -> DayReport: ...
    def status(self, store: Store, start: dt.date, end: dt.date) -> Status: ...

def backfill(store: Store, fetch: Fetch, start: dt.date, end: dt.date) -> RunReport: ...
def sync_one_day(store: Store, fetch: Fetch, target_date: Optional[_Date] = None) -> DayReport: ...
def sync_with_lookback(store: Store, fetch: Fetch, lookback: int = 1) -> RunReport: ...
def store_from_config(
    path: Optional[str] = None, profile: Optional[str] = None
) -> Union[SqliteStore, PostgresStore]: ...
