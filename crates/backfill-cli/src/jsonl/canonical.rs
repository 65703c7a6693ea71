//! A `value` as a record stores it: a JSON string's own text, any other
//! JSON value in its canonical text ([`backfill_core::json`]), written as
//! the line is parsed.

use std::borrow::Cow;

use serde::de;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;

/// The canonical text of a JSON value, the form a non-string `value` is
/// stored in ([`backfill_core::json::canonical`]): compact, object keys
/// sorted by their UTF-8 bytes at every level, strings as serde_json
/// writes them, and numbers exactly as written.
///
/// A line's `value` keeps its numbers' own text. A [`Value`] holds a
/// number as serde_json parsed it (without its `arbitrary_precision`
/// feature: an integer that fits in 64 bits, or else the nearest `f64`),
/// so this gives the text of that number: for a value read from a line,
/// [`backfill_core::json::canonical`] of the line's own text is the stored
/// form.
///
/// ```
/// use backfill_cli::jsonl::canonical_json;
///
/// let value = serde_json::json!({"b": [1, 2.5, "\u{e9}"], "a": {"d": null, "c": true}});
/// assert_eq!(canonical_json(&value), r#"{"a":{"c":true,"d":null},"b":[1,2.5,"é"]}"#);
/// ```
pub fn canonical_json(value: &Value) -> String {
    // serde_json writes a `Value` compactly and its maps sorted; the
    // canonical form of that text is the one definition of the form.
    backfill_core::json::canonical(&value.to_string())
        .expect("serde_json writes one valid JSON value")
}

/// A JSON string, borrowed when it has no escapes. (A bare
/// `Option<Cow<str>>` field would always allocate: serde only borrows a
/// `Cow` that is the field itself.)
#[derive(Deserialize)]
pub(super) struct Text<'a>(#[serde(borrow)] pub(super) Cow<'a, str>);

/// A `value` as a record stores it.
pub(super) enum Payload {
    /// A JSON string's own text.
    Text(String),
    /// Any other JSON value's canonical text ([`backfill_core::json`]),
    /// its numbers as written.
    Json(String),
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // The value's own text, checked by serde_json: numbers are kept
        // from it digit for digit, never parsed into a number type.
        let raw = <&'de RawValue>::deserialize(d)?.get();
        if let Some(inner) = raw.strip_prefix('"') {
            // Checked JSON: a string without escapes is its own text
            // between the quotes.
            if !inner.contains('\\') {
                if let Some(text) = inner.strip_suffix('"') {
                    return Ok(Payload::Text(text.to_owned()));
                }
            }
            let Text(text) = serde_json::from_str(raw).map_err(de::Error::custom)?;
            return Ok(Payload::Text(text.into_owned()));
        }
        backfill_core::json::canonical(raw)
            .map(Payload::Json)
            .map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonl::testing::{record, with_value};
    use serde_json::json;

    #[test]
    fn canonical_form_sorts_keys_at_every_level_and_is_compact() {
        let value: Value = serde_json::from_str(
            r#" { "z" : 1, "a" : { "y" : [ 3, { "b" : 2, "a" : 1 } ], "x" : null },
                 "m" : [true, false, "s\u00e9\n\"q\"", 1.5, -7, 100.0, 18446744073709551615] } "#,
        )
        .unwrap();
        assert_eq!(
            canonical_json(&value),
            r#"{"a":{"x":null,"y":[3,{"a":1,"b":2}]},"m":[true,false,"sé\n\"q\"",1.5,-7,100.0,18446744073709551615],"z":1}"#
        );
        // Keys by their bytes: upper case before lower case, "é" (c3 a9) after "z".
        let value = json!({"é": 1, "z": 2, "Z": 3, "": 4, "a\u{0}": 5, "a": 6});
        assert_eq!(
            canonical_json(&value),
            r#"{"":4,"Z":3,"a":6,"a\u0000":5,"z":2,"é":1}"#
        );
        assert_eq!(canonical_json(&json!([])), "[]");
        assert_eq!(canonical_json(&json!({})), "{}");
        assert_eq!(canonical_json(&json!(null)), "null");
        assert_eq!(
            canonical_json(&json!(0.1 + 0.2)),
            "0.30000000000000004",
            "nearest f64, printed as serde_json does"
        );
        assert_eq!(
            canonical_json(&json!(-9_223_372_036_854_775_808_i64)),
            "-9223372036854775808"
        );
    }

    #[test]
    fn equal_values_store_the_same_text_whatever_their_layout() {
        let a = record(&with_value(r#"{"b":{"y":2,"x":1},"a":[1,{"q":1,"p":2}]}"#));
        let b = record(&with_value(
            "{ \"a\" : [ 1 , { \"p\" : 2 , \"q\" : 1 } ] ,\t\"b\":{\"x\":1,\"y\":2} }",
        ));
        assert_eq!(a.value(), r#"{"a":[1,{"p":2,"q":1}],"b":{"x":1,"y":2}}"#);
        assert_eq!(a, b);
        let escaped = record(&with_value(r#"{"\u00e9":"\u00e9\ud83d\ude00"}"#));
        assert_eq!(escaped.value(), "{\"é\":\"é😀\"}");
        assert_eq!(record(&with_value("12.0")).value(), "12.0");
        assert_eq!(record(&with_value("1E3")).value(), "1E3");
        assert_eq!(record(&with_value("true")).value(), "true");
        assert_eq!(record(&with_value("null")).value(), "null");
        assert_eq!(record(&with_value("[ ]")).value(), "[]");
        // Of a repeated key the last counts, as in a parsed serde_json map.
        let repeated = r#"{"a":1,"b":[],"a":{"y":1,"x":[{"k":2,"k":3}]}}"#;
        assert_eq!(
            record(&with_value(repeated)).value(),
            r#"{"a":{"x":[{"k":3}],"y":1},"b":[]}"#
        );
        // A line's value is the canonical text of the line's own text.
        for json in [
            repeated,
            r#"[1, -2, 3.25, 1e-7, 12345678901234567890, -0, 0.0, "\u00e9\t\u001f", null, false, {}]"#,
            r#"{"\u00e9": {"Z": null, "a": [[], [{}]]}, "e": 18446744073709551616}"#,
        ] {
            assert_eq!(
                record(&with_value(json)).value(),
                backfill_core::json::canonical(json).unwrap(),
                "{json}"
            );
        }
    }

    #[test]
    fn numbers_are_stored_exactly_as_written() {
        for (value, stored) in [
            (
                "[1.2088995980580641,1.5e-300]",
                "[1.2088995980580641,1.5e-300]",
            ),
            (
                r#"{"amt":12345678901234567890.123456789}"#,
                r#"{"amt":12345678901234567890.123456789}"#,
            ),
            ("18446744073709551616", "18446744073709551616"),
            ("-9223372036854775809", "-9223372036854775809"),
            (
                "[ -0 , 1.50 , 1E400 , 0.1e-400 ]",
                "[-0,1.50,1E400,0.1e-400]",
            ),
        ] {
            assert_eq!(record(&with_value(value)).value(), stored, "{value}");
        }
    }

    #[test]
    fn typed_columns_read_the_numbers_a_line_holds() {
        use backfill_core::columns::{Column, ColumnValue, Columns};
        let columns = Columns::new([
            Column::parse("n:integer").unwrap(),
            Column::parse("amt:numeric").unwrap(),
            Column::parse("x:double").unwrap(),
        ])
        .unwrap();
        let r = record(&with_value(
            r#"{"n": -0, "amt": 12345678901234567890.123456789, "x": 1.2088995980580641}"#,
        ));
        assert_eq!(
            columns.extract(&r).unwrap(),
            [
                ColumnValue::Integer(0),
                ColumnValue::Numeric("12345678901234567890.123456789".into()),
                ColumnValue::Double(1.2088995980580641),
            ]
        );
        let r = record(&with_value(
            r#"{"n": -9223372036854775809, "amt": 1, "x": 1}"#,
        ));
        let e = columns.extract(&r).unwrap_err().to_string();
        assert!(e.contains("-9223372036854775809"), "{e}");
        assert!(e.contains("out of range"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn any_double_is_stored_as_its_shortest_round_trip_text(
            xs in proptest::collection::vec(proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL | proptest::num::f64::ZERO, 1..8),
        ) {
            // What an API's JSON writer sends: each double's shortest text.
            let texts: Vec<String> = xs.iter().map(|x| format!("{x:?}")).collect();
            let value = format!("[{}]", texts.join(","));
            let stored = record(&with_value(&value)).value().to_owned();
            proptest::prop_assert_eq!(&stored, &value);
            let back: Vec<f64> = stored[1..stored.len() - 1]
                .split(',')
                .map(|t| t.parse().unwrap())
                .collect();
            proptest::prop_assert_eq!(back, xs);
        }
    }
}
