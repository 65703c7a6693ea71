//! One pass over a JSON value: checked to be JSON, the members a caller
//! wants kept raw (numbers as written), the rest skipped.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

/// Reads the JSON `text` once, checking that it is JSON: when it is an
/// object, sets `found[i]` to the raw value of its member `wanted[i]`
/// (`wanted` sorted; numbers stay raw text and are never rounded; names
/// are compared unescaped; a name given twice is the last one, as JSON
/// parsers and Postgres' `jsonb` read it) and returns `true`; `false` for
/// JSON that is not an object. Members not wanted are skipped, not kept.
pub(super) fn fields<'a>(
    text: &'a str,
    wanted: &[String],
    found: &mut [Option<&'a RawValue>],
) -> serde_json::Result<bool> {
    if !text
        .trim_start_matches([' ', '\t', '\n', '\r'])
        .starts_with('{')
    {
        serde_json::from_str::<IgnoredAny>(text)?;
        return Ok(false);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    de.deserialize_map(Members { wanted, found })?;
    de.end()?;
    Ok(true)
}

/// The visitor of [`fields`]: an object's members.
struct Members<'w, 'f, 'a> {
    wanted: &'w [String],
    found: &'f mut [Option<&'a RawValue>],
}

impl<'de> Visitor<'de> for Members<'_, '_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        while let Some(wanted) = map.next_key_seed(Name(self.wanted))? {
            match wanted {
                Some(i) => self.found[i] = Some(map.next_value()?),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// Up to how many wanted names [`Name`] compares one by one.
pub(super) const LINEAR_NAMES: usize = 16;

/// A member's name: its index among the wanted names, if it is one.
struct Name<'w>(&'w [String]);

impl<'de> DeserializeSeed<'de> for Name<'_> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Name<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: serde::de::Error>(self, name: &str) -> std::result::Result<Self::Value, E> {
        // A few names are compared length first, which most members differ
        // in; many are searched.
        Ok(match self.0.len() <= LINEAR_NAMES {
            true => self
                .0
                .iter()
                .position(|w| w.len() == name.len() && w == name),
            false => self.0.binary_search_by(|w| w.as_str().cmp(name)).ok(),
        })
    }
}
