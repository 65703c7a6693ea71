//! What rustdoc does not check in the front page and the guide: that every
//! relative link leads to a file that exists (and, with `#anchor`, to a
//! heading of it, by GitHub's rule for heading anchors), and that every
//! Rust block left out of the doctests says why. External links are not
//! fetched.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The repository's root, two levels above this crate.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `README.md` and every page of `docs/guide`, in a stable order.
fn pages() -> Vec<PathBuf> {
    let root = root();
    let mut pages = vec![root.join("README.md")];
    let mut guide: Vec<PathBuf> = fs::read_dir(root.join("docs/guide"))
        .expect("docs/guide")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    guide.sort();
    assert!(guide.len() > 1, "no chapters under docs/guide");
    pages.extend(guide);
    pages
}

/// A page's path as the failures name it.
fn shown(path: &Path) -> String {
    let root = root().canonicalize().unwrap();
    let path = path.canonicalize().unwrap_or_else(|_| path.to_owned());
    path.strip_prefix(&root)
        .unwrap_or(&path)
        .display()
        .to_string()
}

/// One line of a page, with whether it is inside a fenced code block (or
/// is a fence itself) and, for an opening fence, its info string.
struct Line<'a> {
    number: usize,
    text: &'a str,
    in_code: bool,
    opens: Option<&'a str>,
}

/// Splits a page into lines, marking fenced code blocks (``` or ~~~, up
/// to three spaces of indent).
fn lines(page: &str) -> Vec<Line<'_>> {
    let mut fence: Option<(char, usize)> = None;
    let mut out = Vec::new();
    for (i, text) in page.lines().enumerate() {
        let trimmed = text.trim_start_matches(' ');
        let indent = text.len() - trimmed.len();
        let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        let run = marker.map_or(0, |m| trimmed.chars().take_while(|c| *c == m).count());
        let mut opens = None;
        let in_code = match fence {
            Some((m, len)) => {
                if marker == Some(m) && run >= len && trimmed[run..].trim().is_empty() {
                    fence = None;
                }
                true
            }
            None if indent <= 3 && run >= 3 => {
                fence = Some((marker.unwrap(), run));
                opens = Some(trimmed[run..].trim());
                true
            }
            None => false,
        };
        out.push(Line {
            number: i + 1,
            text,
            in_code,
            opens,
        });
    }
    out
}

/// A line with its inline code spans removed: a link inside backticks is
/// text, not a link.
fn without_code_spans(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|c| *c == '`').count();
        let after = &rest[start + ticks..];
        match after.find(&"`".repeat(ticks)) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                out.push_str(&rest[start..]);
                return out;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Every link destination of a line: `[text](dest)`, `![alt](dest)` and a
/// reference definition `[label]: dest`.
fn destinations(text: &str) -> Vec<String> {
    let text = without_code_spans(text);
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let mut depth = 0;
        let end = after
            .char_indices()
            .find(|&(_, c)| match c {
                '(' => {
                    depth += 1;
                    false
                }
                ')' if depth == 0 => true,
                ')' => {
                    depth -= 1;
                    false
                }
                _ => false,
            })
            .map_or(after.len(), |(i, _)| i);
        // `(dest "title")`: the destination ends at the first space.
        let dest = after[..end].split_whitespace().next().unwrap_or("");
        out.push(
            dest.trim_start_matches('<')
                .trim_end_matches('>')
                .to_owned(),
        );
        rest = &after[end..];
    }
    // A reference definition: the line's first `]` closes its label.
    let trimmed = text.trim_start();
    if trimmed.starts_with('[')
        && let Some(close) = trimmed.find(']')
        && let Some(definition) = trimmed[close + 1..].strip_prefix(':')
        && let Some(dest) = definition.split_whitespace().next()
    {
        out.push(dest.to_owned());
    }
    out
}

/// The text GitHub makes a heading's anchor from: the heading without its
/// `#`s and inline markup (code ticks, emphasis, links and images keep
/// their text).
fn heading_text(heading: &str) -> String {
    let text = heading.trim_start_matches('#').trim();
    // A closing sequence of `#`s is not part of the heading.
    let text = text.trim_end_matches('#').trim_end();
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '`' | '*' => {}
            '!' if chars.peek() == Some(&'[') => {}
            '[' => {}
            ']' if chars.peek() == Some(&'(') => {
                // Skip the link's destination.
                for d in chars.by_ref() {
                    if d == ')' {
                        break;
                    }
                }
            }
            ']' => {}
            _ => out.push(c),
        }
    }
    out
}

/// GitHub's anchor for a heading's text: lower case, every character but
/// letters, digits, `_`, `-` and spaces dropped, spaces turned to `-`.
fn slug(text: &str) -> String {
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '_' || *c == '-' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor a page's headings make, a repeated one numbered as GitHub
/// numbers it (`name`, `name-1`, `name-2`, …).
fn anchors(page: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for line in lines(page) {
        let text = line.text.trim_start();
        let level = text.chars().take_while(|c| *c == '#').count();
        let is_heading = !line.in_code
            && (1..=6).contains(&level)
            && line.text.len() - text.len() <= 3
            && text[level..].starts_with([' ', '\t']);
        if !is_heading {
            continue;
        }
        let base = slug(&heading_text(text));
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// Whether a destination leaves the repository: `http:`, `https:`,
/// `mailto:` or any other scheme.
fn is_external(dest: &str) -> bool {
    dest.split_once(':').is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    })
}

#[test]
fn every_relative_link_leads_to_a_file_and_a_heading() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = fs::read_to_string(&page).unwrap();
        let dir = page.parent().unwrap();
        for line in lines(&text).iter().filter(|l| !l.in_code) {
            for dest in destinations(line.text) {
                if dest.is_empty() || is_external(&dest) {
                    continue;
                }
                checked += 1;
                let at = format!("{}:{}", shown(&page), line.number);
                let (path, anchor) = match dest.split_once('#') {
                    Some((path, anchor)) => (path, Some(anchor)),
                    None => (dest.as_str(), None),
                };
                let target = if path.is_empty() {
                    page.clone()
                } else {
                    dir.join(path)
                };
                if !target.exists() {
                    broken.push(format!("{at}: {dest}: no such file"));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if target.extension().is_none_or(|ext| ext != "md") {
                    continue;
                }
                let headings = anchors(&fs::read_to_string(&target).unwrap());
                if !headings.contains(anchor) {
                    broken.push(format!(
                        "{at}: {dest}: {} has no heading with the anchor #{anchor}",
                        shown(&target)
                    ));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} relative links found: is the parsing right?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// A Rust block rustdoc does not run says why, in an HTML comment on the
/// line above it (`<!-- ignore: … -->`, `<!-- no_run: … -->`), and every
/// block names its language: rustdoc would take an unnamed one for Rust.
#[test]
fn every_block_names_its_language_and_every_skipped_rust_block_says_why() {
    let mut wrong = Vec::new();
    for page in pages() {
        let text = fs::read_to_string(&page).unwrap();
        let lines = lines(&text);
        for (i, line) in lines.iter().enumerate() {
            let Some(info) = line.opens else { continue };
            let at = format!("{}:{}", shown(&page), line.number);
            if info.is_empty() {
                wrong.push(format!(
                    "{at}: a code block without a language (rustdoc runs it as Rust)"
                ));
                continue;
            }
            let words: Vec<&str> = info.split([',', ' ']).collect();
            if words[0] != "rust" {
                continue;
            }
            for skip in ["ignore", "no_run"] {
                if !words.contains(&skip) {
                    continue;
                }
                let above = i.checked_sub(1).map_or("", |j| lines[j].text.trim());
                let reason = above
                    .strip_prefix(&format!("<!-- {skip}:"))
                    .and_then(|r| r.strip_suffix("-->"))
                    .map(str::trim);
                if reason.is_none_or(str::is_empty) {
                    wrong.push(format!(
                        "{at}: a `{skip}` block without `<!-- {skip}: <why> -->` on the line above"
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn anchors_follow_githubs_rule() {
    let page = "# The guide\n\n## Querying `value` as JSON\n\n## Lineage (OpenLineage)\n\n\
                ```text\n# not a heading\n```\n\n## BigQuery, from this chapter alone\n\n\
                ## Checks\n\n## Checks\n\n### The engine — `Job::new()`\n";
    let expected = [
        "the-guide",
        "querying-value-as-json",
        "lineage-openlineage",
        "bigquery-from-this-chapter-alone",
        "checks",
        "checks-1",
        "the-engine--jobnew",
    ];
    assert_eq!(
        anchors(page),
        expected.iter().map(|s| s.to_string()).collect()
    );
}

#[test]
fn links_in_code_are_not_links() {
    assert_eq!(
        destinations("see [Deletes](concepts.md#deletes), not `[x](y)`, and ![a](b.png)"),
        ["concepts.md#deletes", "b.png"]
    );
    assert_eq!(
        destinations("[label]: ../../BENCHMARKS.md"),
        ["../../BENCHMARKS.md"]
    );
    assert!(is_external("https://openlineage.io"));
    assert!(!is_external("cli.md#settings-and-profiles"));
}
