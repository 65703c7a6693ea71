use super::fields::LINEAR_NAMES;
use super::*;
use crate::conformance::fixtures::{at, day, rec, tomb};
use chrono::NaiveDate;

fn one(declaration: &str, value: &str) -> Result<ColumnValue> {
    let columns = Columns::new([Column::parse(declaration)?])?;
    columns
        .extract(&rec("k1", day(0), value, at(0)))
        .map(|mut v| v.remove(0))
}

fn problem(declaration: &str, value: &str) -> (ColumnProblem, String) {
    match one(declaration, value) {
        Err(Error::InvalidColumn(e)) => (e.problem, e.text),
        other => panic!("{declaration} on {value}: expected InvalidColumn, got {other:?}"),
    }
}

#[test]
fn declarations_parse_with_types_nullability_and_paths() {
    let c = Column::parse("total_cents:bigint=order.total_cents").unwrap();
    assert_eq!(
        (c.name(), c.column_type(), c.field_path(), c.is_nullable()),
        (
            "total_cents",
            ColumnType::Integer,
            &["order".to_owned(), "total_cents".to_owned()][..],
            false
        )
    );
    let c = Column::parse("status:text?").unwrap();
    assert_eq!(
        (c.field_path(), c.is_nullable()),
        (&["status".to_owned()][..], true)
    );
    let c = Column::parse(r#"odd:json=["a.b", "c\"d", "ü"]"#).unwrap();
    assert_eq!(c.field_path(), ["a.b", "c\"d", "ü"]);
    assert_eq!(c.path_text(), r#"["a.b","c\"d","ü"]"#);
    for t in [
        "double precision",
        "FLOAT8",
        "jsonb",
        "timestamp",
        "decimal",
        "bool",
    ] {
        assert!(Column::parse(&format!("c:{t}")).is_ok(), "{t}");
    }
}

#[test]
fn hostile_declarations_are_refused() {
    for bad in [
        "no_type",
        "c:varchar",
        "c:integer=a..b",
        "c:integer=",
        "c:integer=[1, 2]",
        "Upper:text",
        "select;drop:text",
        "key:text",
        "value:json",
        "deleted:boolean",
        "event_date:date",
        "updated_at:timestamptz",
        ":text",
    ] {
        assert!(
            matches!(
                Column::parse(bad),
                Err(Error::InvalidColumnDeclaration { .. } | Error::InvalidName { .. })
            ),
            "{bad} was accepted"
        );
    }
    // An SQL keyword is a name like any other (stores quote every name).
    assert!(Column::parse("select:text").is_ok());
    let deep = format!("c:text={}", vec!["a"; MAX_PATH_DEPTH + 1].join("."));
    assert!(Column::parse(&deep).is_err());
    let twice = Columns::new([
        Column::parse("a:text").unwrap(),
        Column::parse("a:integer").unwrap(),
    ]);
    assert!(matches!(twice, Err(Error::InvalidColumnDeclaration { .. })));
    let many: Vec<Column> = (0..=MAX_COLUMNS)
        .map(|i| Column::parse(&format!("c{i}:text")).unwrap())
        .collect();
    assert!(Columns::new(many).is_err());
    let hundred: Vec<Column> = (0..100)
        .map(|i| Column::parse(&format!("c{i}:integer=f{i}")).unwrap())
        .collect();
    let columns = Columns::new(hundred).unwrap();
    let value = format!(
        "{{{}}}",
        (0..100)
            .map(|i| format!("\"f{i}\": {i}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let got = columns.extract(&rec("k", day(0), &value, at(0))).unwrap();
    let want: Vec<ColumnValue> = (0..100).map(ColumnValue::Integer).collect();
    assert_eq!(got, want);
}

#[test]
fn extract_into_appends_and_leaves_the_buffer_as_it_was_on_error() {
    // Names of one length, one of them wanted, and more wanted names
    // than are compared one by one.
    for n in [3, LINEAR_NAMES + 1] {
        let columns =
            Columns::new((0..n).map(|i| Column::parse(&format!("c{i}:integer=f{i:02}")).unwrap()))
                .unwrap();
        let members = |last: &str| {
            let mut m: Vec<String> = (0..n - 1).map(|i| format!(r#""f{i:02}": {i}"#)).collect();
            m.push(format!(r#""g00": 0, "f{:02}": {last}"#, n - 1));
            format!("{{{}}}", m.join(", "))
        };
        let mut out = vec![ColumnValue::Text("before".into())];
        columns
            .extract_into(&rec("a", day(0), &members("7"), at(0)), &mut out)
            .unwrap();
        assert_eq!(out.len(), 1 + n);
        assert_eq!(out[n], ColumnValue::Integer(7));
        assert_eq!(out[1], ColumnValue::Integer(0));
        let bad = columns.extract_into(&rec("b", day(0), &members(r#""x""#), at(0)), &mut out);
        assert!(matches!(bad, Err(Error::InvalidColumn(_))), "{bad:?}");
        assert_eq!(out.len(), 1 + n, "a refused record appends nothing");
        columns
            .extract_into(&tomb("c", day(0), at(0)), &mut out)
            .unwrap();
        assert_eq!(out.len(), 1 + 2 * n);
        assert!(out[1 + n..].iter().all(|v| *v == ColumnValue::Null));
    }
}

#[test]
fn integers_at_and_past_64_bit_bounds() {
    assert_eq!(
        one("n:integer", r#"{"n": 9223372036854775807}"#).unwrap(),
        ColumnValue::Integer(i64::MAX)
    );
    assert_eq!(
        one("n:integer", r#"{"n": -9223372036854775808}"#).unwrap(),
        ColumnValue::Integer(i64::MIN)
    );
    assert_eq!(
        one("n:integer", r#"{"n": -0}"#).unwrap(),
        ColumnValue::Integer(0)
    );
    for past in [
        "9223372036854775808",
        "-9223372036854775809",
        "100000000000000000000000",
    ] {
        assert_eq!(
            problem("n:integer", &format!(r#"{{"n": {past}}}"#)),
            (ColumnProblem::OutOfRange, past.to_owned())
        );
    }
    for not in ["1.0", "1e3", "\"12\"", "true", "[1]"] {
        assert_eq!(
            problem("n:integer", &format!(r#"{{"n": {not}}}"#)).0,
            ColumnProblem::WrongType(ColumnType::Integer),
            "{not}"
        );
    }
}

#[test]
fn doubles_and_numerics() {
    assert_eq!(
        one("x:double", r#"{"x": -0}"#).unwrap(),
        ColumnValue::Double(-0.0)
    );
    assert_eq!(
        one("x:double", r#"{"x": 1.5e3}"#).unwrap(),
        ColumnValue::Double(1500.0)
    );
    assert_eq!(
        problem("x:double", r#"{"x": 1e400}"#).0,
        ColumnProblem::OutOfRange
    );
    assert_eq!(
        problem("x:double", r#"{"x": -1e400}"#).0,
        ColumnProblem::OutOfRange
    );
    // NaN is not JSON at all.
    assert_eq!(
        problem("x:double", r#"{"x": NaN}"#).0,
        ColumnProblem::NotJson
    );
    assert_eq!(
        problem("x:double", r#"{"x": "1.5"}"#).0,
        ColumnProblem::WrongType(ColumnType::Double)
    );
    // A numeric keeps the number exactly as written, even past f64.
    assert_eq!(
        one("x:numeric", r#"{"x": 1e400}"#).unwrap(),
        ColumnValue::Numeric("1e400".into())
    );
    assert_eq!(
        one("x:numeric", r#"{"x": 0.10000000000000000000001}"#).unwrap(),
        ColumnValue::Numeric("0.10000000000000000000001".into())
    );
    // Past what Postgres' numeric keeps.
    assert_eq!(
        problem("x:numeric", r#"{"x": 1e200000}"#).0,
        ColumnProblem::OutOfRange
    );
    assert_eq!(
        problem("x:numeric", r#"{"x": 1e-20000}"#).0,
        ColumnProblem::OutOfRange
    );
}

#[test]
fn text_boolean_json_date_and_instant() {
    assert_eq!(
        one("s:text", r#"{"s": "a\u00e9\"b"}"#).unwrap(),
        ColumnValue::Text("aé\"b".into())
    );
    assert_eq!(
        problem("s:text", r#"{"s": "a\u0000b"}"#).0,
        ColumnProblem::ContainsNul
    );
    assert_eq!(
        problem("s:text", r#"{"s": 12}"#).0,
        ColumnProblem::WrongType(ColumnType::Text)
    );
    assert_eq!(
        one("b:boolean", r#"{"b": false}"#).unwrap(),
        ColumnValue::Boolean(false)
    );
    assert_eq!(
        problem("b:boolean", r#"{"b": "true"}"#).0,
        ColumnProblem::WrongType(ColumnType::Boolean)
    );
    assert_eq!(
        one("j:json", r#"{"j": {"z": [1, 2.50]}}"#).unwrap(),
        ColumnValue::Json(r#"{"z": [1, 2.50]}"#.into())
    );
    assert_eq!(
        one("d:date", r#"{"d": "2024-02-29"}"#).unwrap(),
        ColumnValue::Date(NaiveDate::from_ymd_opt(2024, 2, 29).unwrap())
    );
    for bad in [
        "2026-02-30",
        "2026-1-05",
        // Ten characters, but not four, two and two digits.
        "02026-1-05",
        "+2026-1-05",
        "2026-01-5 ",
        " 2026-01-5",
        "2026-001-5",
        "2026-01-0x",
        "20260105",
        "0000-01-01",
        "2026-01-05T00:00:00Z",
    ] {
        assert_eq!(
            problem("d:date", &format!(r#"{{"d": "{bad}"}}"#)).0,
            ColumnProblem::NotADate,
            "{bad}"
        );
    }
    assert_eq!(
        one("t:timestamptz", r#"{"t": "2026-01-05T10:00:00.5+02:00"}"#).unwrap(),
        ColumnValue::Timestamp("2026-01-05T08:00:00.5Z".parse().unwrap())
    );
    // Kept to the microsecond, as both stores keep it.
    assert_eq!(
        one(
            "t:timestamptz",
            r#"{"t": "2026-01-05T10:00:00.123456789Z"}"#
        )
        .unwrap(),
        ColumnValue::Timestamp("2026-01-05T10:00:00.123456Z".parse().unwrap())
    );
    for bad in [
        "2026-01-05T10:00:00",
        "2026-01-05",
        "yesterday",
        "2016-12-31T23:59:60Z",
        "0000-12-31T23:00:00Z",
        "9999-12-31T23:00:00-02:00",
    ] {
        assert_eq!(
            problem("t:timestamptz", &format!(r#"{{"t": "{bad}"}}"#)).0,
            ColumnProblem::NotAnInstant,
            "{bad}"
        );
    }
}

#[test]
fn paths_nesting_missing_fields_and_tombstones() {
    let nested = r#"{"customer": {"id": "c7", "a.b": {"c\"d": 5}}, "gone": null}"#;
    assert_eq!(
        one("c:text=customer.id", nested).unwrap(),
        ColumnValue::Text("c7".into())
    );
    assert_eq!(
        one(r#"c:integer=["customer", "a.b", "c\"d"]"#, nested).unwrap(),
        ColumnValue::Integer(5)
    );
    // Missing, null, or below a null: NULL when nullable, refused otherwise.
    for path in ["nope", "gone", "gone.deeper", "customer.nope"] {
        assert_eq!(
            one(&format!("c:text?={path}"), nested).unwrap(),
            ColumnValue::Null
        );
        assert_eq!(
            problem(&format!("c:text={path}"), nested).0,
            ColumnProblem::Missing
        );
    }
    // A level that is not an object.
    assert_eq!(
        problem("c:text?=customer.id.x", nested).0,
        ColumnProblem::Missing
    );
    // Not JSON, or not an object at the top.
    assert_eq!(problem("c:text", "plain text").0, ColumnProblem::NotJson);
    assert_eq!(problem("c:text?", "[1, 2]").0, ColumnProblem::Missing);
    // The last of a name given twice, as jsonb reads it.
    assert_eq!(
        one("n:integer", r#"{"n": 1, "n": 2}"#).unwrap(),
        ColumnValue::Integer(2)
    );
    // Names are compared unescaped; whitespace around the value is JSON's.
    assert_eq!(
        one("n:integer", " \n{\"\\u006e\": 4}\t").unwrap(),
        ColumnValue::Integer(4)
    );
    // The whole value is checked, past the fields the columns read.
    for broken in [
        r#"{"n": 1, "x": tru}"#,
        r#"{"n": 1} x"#,
        r#"{"n": 1, "x": "\q"}"#,
    ] {
        assert_eq!(
            problem("n:integer", broken).0,
            ColumnProblem::NotJson,
            "{broken}"
        );
    }
    // Unicode field names, and deep nesting.
    assert_eq!(
        one("u:integer=ключ", r#"{"ключ": 3}"#).unwrap(),
        ColumnValue::Integer(3)
    );
    let deep = format!(
        "{}7{}",
        r#"{"a":"#.repeat(MAX_PATH_DEPTH),
        "}".repeat(MAX_PATH_DEPTH)
    );
    let path = vec!["a"; MAX_PATH_DEPTH].join(".");
    assert_eq!(
        one(&format!("d:integer={path}"), &deep).unwrap(),
        ColumnValue::Integer(7)
    );
    // A tombstone has every column NULL, required or not.
    let columns = Columns::new([Column::parse("c:text").unwrap()]).unwrap();
    assert_eq!(
        columns.extract(&tomb("k1", day(0), at(0))).unwrap(),
        vec![ColumnValue::Null]
    );
}

#[test]
fn the_error_names_the_key_the_column_the_path_and_the_text() {
    let err = one(
        "total:integer=order.total",
        r#"{"order": {"total": "12 EUR"}}"#,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"invalid record "k1": column total (path order.total): the field is not an integer: "12 EUR""#
    );
    let long = format!(r#"{{"s": "{}"}}"#, "x".repeat(1000));
    let (_, text) = problem("s:integer", &long);
    assert!(text.len() < 210 && text.ends_with('…'), "{text}");
}
