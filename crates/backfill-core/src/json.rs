//! The canonical text of a JSON value: the form every entry point stores a
//! non-string `value` in, so that equal values store equal text whatever
//! their layout, and no number is ever changed.
//!
//! - compact: no whitespace between tokens;
//! - object keys sorted by their UTF-8 bytes, at every level; of a repeated
//!   key the last one counts;
//! - strings as serde_json writes them (`"`, `\` and control characters
//!   escaped, everything else as UTF-8, so `"\u00e9"` becomes `"é"`);
//! - **numbers exactly as written**: `1.50` stays `1.50`,
//!   `12345678901234567890.123456789` and `18446744073709551616` keep every
//!   digit. A reader that needs one spelling per number normalises it
//!   itself; nothing here rounds a number through `f64`.
//!
//! ```
//! use backfill_core::json::canonical;
//!
//! let text = r#" { "b": [1, 2.50, "\u00e9"], "a": {"d": null, "c": 1.2088995980580641} } "#;
//! assert_eq!(
//!     canonical(text).unwrap(),
//!     r#"{"a":{"c":1.2088995980580641,"d":null},"b":[1,2.50,"é"]}"#
//! );
//! assert_eq!(canonical("18446744073709551616").unwrap(), "18446744073709551616");
//! assert!(canonical("[1,]").is_err());
//! ```

use std::fmt;

/// How deep arrays and objects may nest, as serde_json's own limit.
pub const MAX_DEPTH: usize = 128;

/// Text that is not one JSON value, or nests deeper than [`MAX_DEPTH`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    message: &'static str,
    at: usize,
}

impl JsonError {
    /// What is wrong.
    pub fn message(&self) -> &'static str {
        self.message
    }

    /// The byte offset where it was found.
    pub fn offset(&self) -> usize {
        self.at
    }
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.message, self.at)
    }
}

impl std::error::Error for JsonError {}

/// The canonical text of the one JSON value `text` holds (whitespace
/// around it allowed), as the [module](self) describes it.
///
/// # Errors
///
/// [`JsonError`] when `text` is not exactly one JSON value.
pub fn canonical(text: &str) -> Result<String, JsonError> {
    let mut out = Vec::with_capacity(text.len());
    canonical_into(text, &mut out)?;
    // Only whole UTF-8 strings from `text` and ASCII were written.
    String::from_utf8(out).map_err(|_| JsonError {
        message: "invalid UTF-8",
        at: 0,
    })
}

/// [`canonical`], appended to `out` (left as it was on an error).
///
/// # Errors
///
/// As [`canonical`].
pub fn canonical_into(text: &str, out: &mut Vec<u8>) -> Result<(), JsonError> {
    let start = out.len();
    let mut scan = Scanner {
        text,
        bytes: text.as_bytes(),
        at: 0,
    };
    let done = scan.value(out, 0).and_then(|()| {
        scan.skip_ws();
        if scan.at == scan.bytes.len() {
            Ok(())
        } else {
            Err(scan.error("trailing characters"))
        }
    });
    if done.is_err() {
        out.truncate(start);
    }
    done
}

/// Whether `text` is exactly one JSON number
/// (`-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?`).
///
/// ```
/// use backfill_core::json::is_number;
///
/// assert!(is_number("-0") && is_number("1E+3") && is_number("12345678901234567890.5"));
/// assert!(!is_number("01") && !is_number("NaN") && !is_number("1."));
/// ```
pub fn is_number(text: &str) -> bool {
    number_len(text.as_bytes()) == Some(text.len())
}

/// The length of the JSON number at the start of `b`, if one is there
/// (`-`, an integer part without leading zeros, an optional fraction and
/// exponent).
fn number_len(b: &[u8]) -> Option<usize> {
    let digits = |mut i: usize| {
        let start = i;
        while matches!(b.get(i), Some(b'0'..=b'9')) {
            i += 1;
        }
        (i > start).then_some(i)
    };
    let mut i = usize::from(b.first() == Some(&b'-'));
    i = match b.get(i) {
        Some(b'0') => i + 1,
        Some(b'1'..=b'9') => digits(i)?,
        _ => return None,
    };
    if b.get(i) == Some(&b'.') {
        i = digits(i + 1)?;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        i = digits(i)?;
    }
    Some(i)
}

struct Scanner<'t> {
    text: &'t str,
    bytes: &'t [u8],
    at: usize,
}

impl<'t> Scanner<'t> {
    fn error(&self, message: &'static str) -> JsonError {
        JsonError {
            message,
            at: self.at,
        }
    }

    fn skip_ws(&mut self) {
        while matches!(self.bytes.get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn value(&mut self, out: &mut Vec<u8>, depth: usize) -> Result<(), JsonError> {
        self.skip_ws();
        match self.bytes.get(self.at) {
            Some(b'{') => self.object(out, depth + 1),
            Some(b'[') => self.array(out, depth + 1),
            Some(b'"') => {
                let s = self.string()?;
                write_string(out, &s);
                Ok(())
            }
            Some(b't') => self.literal(out, "true"),
            Some(b'f') => self.literal(out, "false"),
            Some(b'n') => self.literal(out, "null"),
            Some(b'-' | b'0'..=b'9') => {
                let len = number_len(&self.bytes[self.at..])
                    .ok_or_else(|| self.error("invalid number"))?;
                out.extend_from_slice(&self.bytes[self.at..self.at + len]);
                self.at += len;
                Ok(())
            }
            Some(_) => Err(self.error("expected a value")),
            None => Err(self.error("unexpected end")),
        }
    }

    fn literal(&mut self, out: &mut Vec<u8>, word: &'static str) -> Result<(), JsonError> {
        if self.bytes[self.at..].starts_with(word.as_bytes()) {
            out.extend_from_slice(word.as_bytes());
            self.at += word.len();
            Ok(())
        } else {
            Err(self.error("expected a value"))
        }
    }

    /// A string at `self.at` (its opening quote), decoded: borrowed from
    /// the text when it has no escapes.
    fn string(&mut self) -> Result<std::borrow::Cow<'t, str>, JsonError> {
        let start = self.at;
        let mut i = start + 1;
        let mut escaped = false;
        loop {
            match self.bytes.get(i) {
                Some(b'"') => break,
                Some(b'\\') => {
                    escaped = true;
                    i += 2;
                }
                Some(0..=0x1f) => {
                    self.at = i;
                    return Err(self.error("control character in a string"));
                }
                Some(_) => i += 1,
                None => {
                    self.at = i.min(self.bytes.len());
                    return Err(self.error("unterminated string"));
                }
            }
        }
        self.at = i + 1;
        if !escaped {
            return Ok(std::borrow::Cow::Borrowed(&self.text[start + 1..i]));
        }
        // serde_json decodes the escapes (and refuses lone surrogates).
        serde_json::from_str::<String>(&self.text[start..=i])
            .map(std::borrow::Cow::Owned)
            .map_err(|_| JsonError {
                message: "invalid escape in a string",
                at: start,
            })
    }

    /// Skips whitespace, then `byte` if it comes next.
    fn eat(&mut self, byte: u8) -> bool {
        self.skip_ws();
        let next = self.bytes.get(self.at) == Some(&byte);
        self.at += usize::from(next);
        next
    }

    /// Past the opening `[` or `{` of a container at `depth`.
    fn open(&mut self, depth: usize) -> Result<(), JsonError> {
        if depth > MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        self.at += 1;
        Ok(())
    }

    fn array(&mut self, out: &mut Vec<u8>, depth: usize) -> Result<(), JsonError> {
        self.open(depth)?;
        out.push(b'[');
        if !self.eat(b']') {
            loop {
                self.value(out, depth)?;
                if self.eat(b']') {
                    break;
                }
                if !self.eat(b',') {
                    return Err(self.error("expected `,` or `]`"));
                }
                out.push(b',');
            }
        }
        out.push(b']');
        Ok(())
    }

    fn object(&mut self, out: &mut Vec<u8>, depth: usize) -> Result<(), JsonError> {
        self.open(depth)?;
        // Each member's canonical value is written after the others' in
        // one buffer; the members are then sorted and copied out.
        let mut items: Vec<u8> = Vec::new();
        let mut members: Vec<(std::borrow::Cow<'t, str>, std::ops::Range<usize>)> = Vec::new();
        if !self.eat(b'}') {
            loop {
                self.skip_ws();
                if self.bytes.get(self.at) != Some(&b'"') {
                    return Err(self.error("expected a member name"));
                }
                let key = self.string()?;
                if !self.eat(b':') {
                    return Err(self.error("expected `:`"));
                }
                let start = items.len();
                self.value(&mut items, depth)?;
                members.push((key, start..items.len()));
                if self.eat(b'}') {
                    break;
                }
                if !self.eat(b',') {
                    return Err(self.error("expected `,` or `}`"));
                }
            }
        }
        // Stable: of a repeated key the last one is kept below.
        members.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        out.push(b'{');
        let mut first = true;
        for (i, (key, range)) in members.iter().enumerate() {
            if members.get(i + 1).is_some_and(|next| next.0 == *key) {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            write_string(out, key);
            out.push(b':');
            out.extend_from_slice(&items[range.clone()]);
        }
        out.push(b'}');
        Ok(())
    }
}

/// A string as serde_json writes it.
fn write_string(out: &mut Vec<u8>, s: &str) {
    // Nothing to escape, the common case: the text as it is.
    if !s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
        return;
    }
    // Writing a string into a Vec cannot fail.
    serde_json::to_writer(out, s).expect("serializing a string into memory");
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout_goes_numbers_stay() {
        let text = r#" { "z" : 1, "a" : { "y" : [ 3, { "b" : 2, "a" : 1 } ], "x" : null },
             "m" : [true, false, "s\u00e9\n\"q\"", 1.50, -7, 1e2, 18446744073709551615, -0, 1E-7] } "#;
        assert_eq!(
            canonical(text).unwrap(),
            r#"{"a":{"x":null,"y":[3,{"a":1,"b":2}]},"m":[true,false,"sé\n\"q\"",1.50,-7,1e2,18446744073709551615,-0,1E-7],"z":1}"#
        );
        // Keys by their bytes: upper case before lower case, "é" after "z".
        assert_eq!(
            canonical(r#"{"é":1,"z":2,"Z":3,"":4,"a\u0000":5,"a":6}"#).unwrap(),
            r#"{"":4,"Z":3,"a":6,"a\u0000":5,"z":2,"é":1}"#
        );
        // Of a repeated key the last counts, as in a parsed serde_json map.
        assert_eq!(
            canonical(r#"{"a":1,"b":[],"a":{"y":1,"x":[{"k":2,"k":3}]}}"#).unwrap(),
            r#"{"a":{"x":[{"k":3}],"y":1},"b":[]}"#
        );
        for (text, want) in [
            ("[ ]", "[]"),
            ("{ }", "{}"),
            (" null ", "null"),
            (
                "12345678901234567890.123456789",
                "12345678901234567890.123456789",
            ),
            ("1.5e-300", "1.5e-300"),
            (r#""\ud83d\ude00\t""#, "\"😀\\t\""),
            (r#""\/""#, r#""/""#),
        ] {
            assert_eq!(canonical(text).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn what_is_not_one_json_value_is_refused() {
        for bad in [
            "",
            " ",
            "[1,]",
            "{\"a\":1,}",
            "01",
            "1.",
            ".5",
            "-",
            "1e",
            "+1",
            "NaN",
            "Infinity",
            "[1 2]",
            "{\"a\" 1}",
            "{1:2}",
            "\"a",
            "\"\\x\"",
            "\"\\ud800\"",
            "tru",
            "nul",
            "1 2",
            "[",
            "]",
            "\"a\u{1}\"",
            "{\"a\":1}}",
        ] {
            assert!(canonical(bad).is_err(), "{bad:?}");
        }
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert_eq!(canonical(&deep).unwrap_err().message(), "nested too deeply");
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert_eq!(canonical(&ok).unwrap(), ok);
        let mut out = b"kept".to_vec();
        assert!(canonical_into("[1,", &mut out).is_err());
        assert_eq!(out, b"kept");
    }

    proptest! {
        #[test]
        fn any_value_serde_json_writes_canonicalises_to_what_serde_json_sorts(
            value in json_value(),
        ) {
            // serde_json's maps are sorted by key (no `preserve_order`) and
            // it writes compactly: its text is already canonical.
            let text = value.to_string();
            prop_assert_eq!(canonical(&text).unwrap(), text.clone());
            let pretty = serde_json::to_string_pretty(&value).unwrap();
            prop_assert_eq!(canonical(&pretty).unwrap(), text);
        }

        #[test]
        fn doubles_keep_their_shortest_round_trip_text(x in any::<f64>().prop_filter("finite", |x| x.is_finite())) {
            let text = format!("{x:e}");
            prop_assert_eq!(canonical(&text).unwrap(), text.clone());
            prop_assert_eq!(canonical(&text).unwrap().parse::<f64>().unwrap(), x);
        }

        #[test]
        fn long_decimals_keep_every_digit(int in "-?[1-9][0-9]{0,60}", frac in "[0-9]{1,60}") {
            let text = format!("{{\"amt\":{int}.{frac}}}");
            prop_assert_eq!(canonical(&text).unwrap(), text);
        }
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |x| x.is_finite())
                .prop_map(Value::from),
            "\\PC{0,8}".prop_map(Value::String),
            "[\"\\\\\n\t\u{1}\u{7f}é]{0,4}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("\\PC{0,6}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }
}
