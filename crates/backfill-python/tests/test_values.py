"""Numbers in `value` are stored exactly: every double as its shortest
round-trip text, every integer with all its digits, a Decimal as written;
from Python and from the command line alike."""

import datetime as dt
import decimal
import json
import math
import random
import struct
import subprocess

import pytest

import backfill
from backfill import Record

AT = dt.datetime(2026, 1, 5, 12, tzinfo=dt.timezone.utc)
DAY = dt.date(2026, 1, 5)


def random_doubles(n, seed):
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        # Every bit pattern: subnormals, huge and tiny exponents, -0.0.
        (x,) = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))
        if math.isfinite(x):
            out.append(x)
    return out + [1.2088995980580641, 1.5e-300, 5e-324, 1.7976931348623157e308, 0.1, -0.0]


def stored(value):
    return Record("k", DAY, value, AT).value


def test_every_double_is_stored_as_its_shortest_round_trip_text():
    xs = random_doubles(20_000, seed=7)
    for chunk in range(0, len(xs), 500):
        part = xs[chunk:chunk + 500]
        text = stored(part)
        assert text == json.dumps(part, separators=(",", ":"))
        back = json.loads(text)
        assert [struct.pack("<d", x) for x in back] == [struct.pack("<d", x) for x in part]
    assert stored({"v": [1.2088995980580641, 1.5e-300]}) == '{"v":[1.2088995980580641,1.5e-300]}'


def test_integers_keep_every_digit_and_decimals_their_text():
    assert stored(2**64) == "18446744073709551616"
    assert stored([-(2**200), 2**63 - 1, -(2**63) - 1]) == (
        f"[{-(2**200)},{2**63 - 1},{-(2**63) - 1}]"
    )
    amt = decimal.Decimal("12345678901234567890.123456789")
    assert stored({"amt": amt}) == '{"amt":12345678901234567890.123456789}'
    assert stored([decimal.Decimal("1.50"), decimal.Decimal("-0"), decimal.Decimal("1E+3")]) == (
        "[1.50,-0,1E+3]"
    )
    # Keys sorted, as before; bool and int keys as json.dumps writes them.
    assert stored({"b": 1, "a": {True: 1, 2: None, None: 1.0}}) == (
        '{"a":{"2":null,"null":1.0,"true":1},"b":1}'
    )


def test_values_that_are_not_json_are_refused():
    for bad in [
        math.nan,
        [math.inf],
        {"x": decimal.Decimal("NaN")},
        {"x": decimal.Decimal("-Infinity")},
        {("a",): 1},
        {"x": object()},
        {1, 2},
    ]:
        with pytest.raises(backfill.InvalidRecord, match="not JSON"):
            stored(bad)
    nested = []
    for _ in range(200):
        nested = [nested]
    with pytest.raises(backfill.InvalidRecord, match="nested deeper"):
        stored(nested)
    loop = []
    loop.append(loop)
    with pytest.raises(backfill.InvalidRecord, match="contains itself"):
        stored(loop)


def test_the_stored_numbers_are_the_ones_the_store_returns(tmp_path):
    store = backfill.SqliteStore(str(tmp_path / "p.db"))
    xs = random_doubles(2_000, seed=11)
    values = {f"k{i}": [x, 2**64 + i] for i, x in enumerate(xs)}
    backfill.backfill(
        store, lambda d: [Record(k, d, v, AT) for k, v in values.items()], DAY, DAY
    )
    for row in store.rows():
        assert row.value == json.dumps(values[row.key], separators=(",", ":"))


def test_the_command_line_stores_the_numbers_a_fetch_prints(tmp_path, cli):
    xs = random_doubles(3_000, seed=13)
    lines = []
    for i, x in enumerate(xs):
        value = {"x": x, "big": 2**64 + i, "amt": f"__AMT{i}__"}
        line = json.dumps({"key": f"k{i}", "event_date": str(DAY), "value": value,
                           "updated_at": "2026-01-05T12:00:00Z"})
        # A decimal with more digits than any double, as an API prints it.
        lines.append(line.replace(f'"__AMT{i}__"', f"12345678901234567890.{i:09d}"))
    (tmp_path / f"{DAY}.jsonl").write_text("\n".join(lines) + "\n")
    db = tmp_path / "cli.db"
    subprocess.run(
        [cli, "backfill", "--from", str(DAY), "--to", str(DAY), "--store", f"sqlite://{db}",
         "--fetch-files", str(tmp_path / "{day}.jsonl")],
        check=True, capture_output=True,
    )
    by_key = {r.key: r.value for r in backfill.SqliteStore(str(db)).rows()}
    assert len(by_key) == len(xs)
    for i, x in enumerate(xs):
        want = (f'{{"amt":12345678901234567890.{i:09d},"big":{2**64 + i},'
                f'"x":{json.dumps(x)}}}')
        assert by_key[f"k{i}"] == want
        # The same record from Python stores the same text.
        amt = decimal.Decimal(f"12345678901234567890.{i:09d}")
        assert stored({"x": x, "big": 2**64 + i, "amt": amt}) == want
