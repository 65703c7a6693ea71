//! A `value` as a record stores it: a JSON string's own text, any other
//! JSON value in its canonical text, written as the line is parsed.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// The canonical text of a JSON value, the form a non-string `value` is
/// stored in:
///
/// - compact: no whitespace between tokens;
/// - object keys sorted by their UTF-8 bytes, at every level (if an object
///   repeats a key, the last one counts);
/// - strings escaped as serde_json writes them (`"` `\` and control
///   characters escaped, everything else as UTF-8, so `"\u00e9"` becomes
///   `"é"`);
/// - numbers as serde_json prints them once parsed: an integer that fits
///   in 64 bits exactly, any other number as the nearest `f64` (`1.50`
///   becomes `1.5`, `1e2` becomes `100.0`).
///
/// A fetch that must keep other text exactly (a number with more digits
/// than an `f64` holds, a particular key order) sends `value` as a JSON
/// string, which is stored byte for byte.
///
/// ```
/// use backfill_cli::jsonl::canonical_json;
///
/// let value = serde_json::json!({"b": [1, 2.50, "\u{e9}"], "a": {"d": null, "c": true}});
/// assert_eq!(canonical_json(&value), r#"{"a":{"c":true,"d":null},"b":[1,2.5,"é"]}"#);
/// ```
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::with_capacity(128);
    // The same writer as for a line's `value`; visiting a `Value` cannot
    // fail.
    let _ = value.deserialize_any(Canonical(&mut out));
    into_string(out)
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
    /// Any other JSON value's canonical text ([`canonical_json`]).
    Json(String),
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PayloadVisitor)
    }
}

struct PayloadVisitor;

impl PayloadVisitor {
    fn json<E>(write: impl FnOnce(Canonical<'_>) -> Result<(), E>) -> Result<Payload, E> {
        let mut out = Vec::with_capacity(64);
        write(Canonical(&mut out))?;
        Ok(Payload::Json(into_string(out)))
    }
}

impl<'de> Visitor<'de> for PayloadVisitor {
    type Value = Payload;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Payload, E> {
        Ok(Payload::Text(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Payload, E> {
        Ok(Payload::Text(v))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Payload, E> {
        Self::json(|c| c.visit_bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Payload, E> {
        Self::json(|c| c.visit_i64(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Payload, E> {
        Self::json(|c| c.visit_u64(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Payload, E> {
        Self::json(|c| c.visit_f64(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Payload, E> {
        Self::json(|c| c.visit_unit())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Payload, A::Error> {
        Self::json(|c| c.visit_seq(seq))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Payload, A::Error> {
        Self::json(|c| c.visit_map(map))
    }
}

/// Writes the canonical text of the value it visits into its buffer.
struct Canonical<'o>(&'o mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for Canonical<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

/// The key under which serde_json hands over a number's text when its
/// `arbitrary_precision` feature is on (no crate here turns it on, but any
/// crate in a build may).
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

impl<'de> Visitor<'de> for Canonical<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.0.extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        write_json(self.0, &v);
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        write_json(self.0, &v);
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        write_json(self.0, &v);
        Ok(())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        write_json(self.0, v);
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.0.extend_from_slice(b"null");
        Ok(())
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.visit_unit()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.push(b'[');
        let mut first = true;
        loop {
            let at = self.0.len();
            if !first {
                self.0.push(b',');
            }
            if seq.next_element_seed(Canonical(self.0))?.is_none() {
                self.0.truncate(at);
                break;
            }
            first = false;
        }
        self.0.push(b']');
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut entries: Vec<(Cow<'de, str>, Vec<u8>)> = Vec::new();
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            if entries.is_empty() && key == NUMBER_TOKEN {
                let text: String = map.next_value()?;
                let number: serde_json::Number = text.parse().map_err(de::Error::custom)?;
                return write_number(self.0, &number).map_err(de::Error::custom);
            }
            let mut item = Vec::new();
            map.next_value_seed(Canonical(&mut item))?;
            entries.push((key, item));
        }
        // Sorted here, not by a map type, whose order would depend on
        // serde_json's `preserve_order` feature. Stable, so of a repeated
        // key the last one can be kept, as serde_json's own maps do.
        entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        self.0.push(b'{');
        let mut first = true;
        for (i, (key, item)) in entries.iter().enumerate() {
            if entries.get(i + 1).is_some_and(|next| next.0 == *key) {
                continue;
            }
            if !first {
                self.0.push(b',');
            }
            first = false;
            write_json(self.0, key.as_ref());
            self.0.push(b':');
            self.0.extend_from_slice(item);
        }
        self.0.push(b'}');
        Ok(())
    }
}

/// A number as serde_json prints it once parsed: through u64, i64 or f64
/// rather than the number's own text.
fn write_number(out: &mut Vec<u8>, n: &serde_json::Number) -> Result<(), &'static str> {
    if let Some(u) = n.as_u64() {
        write_json(out, &u);
    } else if let Some(i) = n.as_i64() {
        write_json(out, &i);
    } else {
        write_json(out, &n.as_f64().ok_or("a number out of range")?);
    }
    Ok(())
}

/// Text known to be UTF-8: only serde_json's strings and ASCII are ever
/// written.
fn into_string(out: Vec<u8>) -> String {
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Writing a string or a number into a Vec cannot fail.
    serde_json::to_writer(out, value).expect("serializing a JSON scalar into memory");
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
                 "m" : [true, false, "s\u00e9\n\"q\"", 1.50, -7, 1e2, 18446744073709551615] } "#,
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
        assert_eq!(record(&with_value("1E3")).value(), "1000.0");
        assert_eq!(record(&with_value("true")).value(), "true");
        assert_eq!(record(&with_value("null")).value(), "null");
        assert_eq!(record(&with_value("[ ]")).value(), "[]");
        // Of a repeated key the last counts, as in a parsed serde_json map.
        let repeated = r#"{"a":1,"b":[],"a":{"y":1,"x":[{"k":2,"k":3}]}}"#;
        assert_eq!(
            record(&with_value(repeated)).value(),
            r#"{"a":{"x":[{"k":3}],"y":1},"b":[]}"#
        );
        // A line's value and `canonical_json` of the parsed value agree.
        for json in [
            repeated,
            r#"[1, -2, 3.25, 1e-7, 12345678901234567890, -0, 0.0, "\u00e9\t\u001f", null, false, {}]"#,
            r#"{"\u00e9": {"Z": null, "a": [[], [{}]]}, "e": 18446744073709551616}"#,
        ] {
            let value: Value = serde_json::from_str(json).unwrap();
            assert_eq!(
                record(&with_value(json)).value(),
                canonical_json(&value),
                "{json}"
            );
        }
    }
}
