//! Text for people: a long text cut to a size without splitting a
//! character, and an error shown with its causes. One copy of each rule,
//! for the stores, the command line and the Python package.

use std::borrow::Cow;
use std::error::Error as StdError;
use std::fmt;

/// The longest prefix of `text` of at most `max` bytes that ends on a
/// character boundary.
///
/// ```
/// assert_eq!(backfill_core::text::prefix("héllo", 2), "h");
/// assert_eq!(backfill_core::text::prefix("héllo", 3), "hé");
/// ```
pub fn prefix(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` as it is if it has at most `max` bytes, else its [`prefix`] of
/// `max` bytes marked `…`.
///
/// ```
/// assert_eq!(backfill_core::text::cut("abcdef", 3), "abc…");
/// assert_eq!(backfill_core::text::cut("abc", 3), "abc");
/// ```
pub fn cut(text: &str, max: usize) -> Cow<'_, str> {
    match text.len() <= max {
        true => Cow::Borrowed(text),
        false => Cow::Owned(format!("{}…", prefix(text, max))),
    }
}

/// `error` and its causes, outermost first.
pub fn causes<'a>(
    error: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(error), |e: &&'a (dyn StdError + 'static)| {
        (*e).source()
    })
}

/// Shows an error and its causes, `error: cause: cause`, each cause whose
/// text is already shown skipped. Driver errors often keep the useful part
/// in a cause (tokio-postgres shows only "db error"; the server's message
/// is its source).
///
/// ```
/// let io = std::io::Error::other("disk full");
/// let shown = backfill_core::text::Chain(&io).to_string();
/// assert_eq!(shown, "disk full");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Chain<'a>(pub &'a (dyn StdError + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = String::new();
        for error in causes(self.0) {
            let text = error.to_string();
            if shown.is_empty() {
                shown = text;
            } else if !shown.contains(&text) {
                shown.push_str(": ");
                shown.push_str(&text);
            }
        }
        f.write_str(&shown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_never_split_a_character() {
        let text = "é".repeat(10);
        for max in 0..=text.len() + 1 {
            let p = prefix(&text, max);
            assert!(p.len() <= max && max - p.len() <= 1, "{max}");
        }
        assert_eq!(cut(&text, 3), "é…");
    }

    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("db error")
        }
    }

    impl StdError for Outer {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_chain_shows_each_cause_once() {
        let e = Outer(std::io::Error::other("relation does not exist"));
        assert_eq!(causes(&e).count(), 2);
        assert_eq!(Chain(&e).to_string(), "db error: relation does not exist");
    }
}
