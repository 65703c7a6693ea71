//! Which Postgres the tests use: a pure decision, so that it can be tested
//! without Docker or a registry.
//!
//! [`plan`] turns what was found about the machine ([`Inputs`]) into an
//! ordered list of [`Candidate`]s to try, plus the candidates ruled out
//! before trying (with why). The caller tries the candidates in order and
//! adds a [`Failure`] for each one that fails; when none is left,
//! [`skip_message`] says what was tried and why each failed.

use std::fmt;

/// The script that builds the local image; the single definition of
/// [`IMAGE_VERSION`](crate::image_version) lives in it.
pub(crate) const SCRIPT: &str = include_str!("../../../scripts/postgres-image.sh");

/// The image `scripts/postgres-image.sh` builds by default.
pub const LOCAL_IMAGE: &str = "backfill/postgres";
/// The local image's default tag.
pub const LOCAL_TAG: &str = "15";
/// The official image, pulled by testcontainers, tried when the local image
/// cannot be built or run (a laptop without Debian's `postgresql-15`).
pub const OFFICIAL_IMAGE: &str = "postgres";
/// The official image's tag.
pub const OFFICIAL_TAG: &str = "15-alpine";

/// The `IMAGE_VERSION=` value of `scripts/postgres-image.sh`, which stamps
/// it on the image as the label `backfill.image.version`; an image whose
/// label differs is rebuilt.
///
/// # Panics
///
/// When the script has no `IMAGE_VERSION=` line (a unit test guards it).
pub fn image_version() -> &'static str {
    parse_image_version(SCRIPT).expect("scripts/postgres-image.sh sets IMAGE_VERSION=")
}

fn parse_image_version(script: &str) -> Option<&str> {
    script.lines().find_map(|line| {
        let value = line.trim().strip_prefix("IMAGE_VERSION=")?;
        let value = value.trim_matches(|c| c == '"' || c == '\'');
        (!value.is_empty()).then_some(value)
    })
}

/// Where an image comes from, which decides what the tests may expect of
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Built on this machine by `scripts/postgres-image.sh`: also serves TLS
    /// given `POSTGRES_SSL_CERT` / `POSTGRES_SSL_KEY`.
    Local,
    /// The official image, pulled from a registry.
    Official,
    /// Named by `BACKFILL_PG_IMAGE` / `BACKFILL_PG_TAG`.
    Given,
}

/// A container image to run Postgres from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Repository name, e.g. `backfill/postgres`.
    pub name: String,
    /// Tag, e.g. `15`.
    pub tag: String,
    /// Where it comes from.
    pub origin: Origin,
}

impl Image {
    fn new(name: &str, tag: &str, origin: Origin) -> Self {
        Self {
            name: name.to_owned(),
            tag: tag.to_owned(),
            origin,
        }
    }
}

impl fmt::Display for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.name, self.tag)?;
        match self.origin {
            Origin::Local => f.write_str(" (local build)"),
            Origin::Official => f.write_str(" (official, pulled)"),
            Origin::Given => f.write_str(" (BACKFILL_PG_IMAGE)"),
        }
    }
}

/// The state of the local image on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalImage {
    /// Present, with the script's current `IMAGE_VERSION`.
    Current,
    /// Absent or older than the script, and this machine has what the
    /// script needs to build it.
    Buildable,
    /// Absent or older, and cannot be built here: why.
    Unbuildable(String),
}

/// What was found about the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inputs {
    /// `BACKFILL_PG_URL`.
    pub url: Option<String>,
    /// `BACKFILL_PG_IMAGE`.
    pub image: Option<String>,
    /// `BACKFILL_PG_TAG`.
    pub tag: Option<String>,
    /// Whether Docker answers, or why not.
    pub docker: Result<(), String>,
    /// The local image (only looked at when Docker answers).
    pub local: LocalImage,
}

/// Something to try, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Candidate {
    /// A server given by URL: used as is.
    Url(String),
    /// Start a container from `image`, after building it with the script
    /// when `build` is set.
    Container {
        /// The image.
        image: Image,
        /// Run `scripts/postgres-image.sh` first.
        build: bool,
    },
}

/// A candidate that was ruled out or failed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What was tried, e.g. `postgres:15-alpine (official, pulled)`.
    pub what: String,
    /// Why it did not give a server.
    pub why: String,
}

/// The outcome of [`plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// What to try, in order.
    pub candidates: Vec<Candidate>,
    /// What was ruled out before trying, and why.
    pub ruled_out: Vec<Failure>,
}

/// Decides what to try:
///
/// 1. `BACKFILL_PG_URL` set: that server, nothing else.
/// 2. Docker unreachable: nothing (both images are ruled out, saying so).
/// 3. `BACKFILL_PG_IMAGE` names another image than the local one: that
///    image alone (the user chose it).
/// 4. Otherwise the local image (`BACKFILL_PG_TAG` may change its tag),
///    built first when absent or outdated and buildable here, then the
///    official `postgres:15-alpine` as a fallback.
pub fn plan(inputs: &Inputs) -> Plan {
    if let Some(url) = &inputs.url {
        return Plan {
            candidates: vec![Candidate::Url(url.clone())],
            ruled_out: Vec::new(),
        };
    }
    let name = inputs.image.as_deref().unwrap_or(LOCAL_IMAGE);
    let local = Image::new(
        name,
        inputs.tag.as_deref().unwrap_or(LOCAL_TAG),
        Origin::Local,
    );
    let official = Image::new(OFFICIAL_IMAGE, OFFICIAL_TAG, Origin::Official);
    if name != LOCAL_IMAGE {
        let given = Image {
            origin: Origin::Given,
            ..local
        };
        return match &inputs.docker {
            Ok(()) => Plan {
                candidates: vec![Candidate::Container {
                    image: given,
                    build: false,
                }],
                ruled_out: Vec::new(),
            },
            Err(why) => Plan {
                candidates: Vec::new(),
                ruled_out: vec![unreachable(&given, why)],
            },
        };
    }
    if let Err(why) = &inputs.docker {
        return Plan {
            candidates: Vec::new(),
            ruled_out: vec![unreachable(&local, why), unreachable(&official, why)],
        };
    }
    let mut plan = Plan {
        candidates: Vec::new(),
        ruled_out: Vec::new(),
    };
    match &inputs.local {
        LocalImage::Current => plan.candidates.push(Candidate::Container {
            image: local,
            build: false,
        }),
        LocalImage::Buildable => plan.candidates.push(Candidate::Container {
            image: local,
            build: true,
        }),
        LocalImage::Unbuildable(why) => plan.ruled_out.push(Failure {
            what: local.to_string(),
            why: format!("cannot be built here: {why}"),
        }),
    }
    plan.candidates.push(Candidate::Container {
        image: official,
        build: false,
    });
    plan
}

fn unreachable(image: &Image, why: &str) -> Failure {
    Failure {
        what: image.to_string(),
        why: format!("Docker is not reachable ({why})"),
    }
}

/// The message printed when no candidate gave a server: each one tried (or
/// ruled out) and why it failed, then how to get a server.
pub fn skip_message(failures: &[Failure]) -> String {
    let mut message = String::from("no test Postgres:");
    for failure in failures {
        message.push_str(&format!("\n  - {}: {}", failure.what, failure.why));
    }
    message.push_str(
        "\nStart Docker (with Debian's postgresql-15 installed, or access to a registry \
         for postgres:15-alpine), or set BACKFILL_PG_URL to a server of your own.",
    );
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Inputs {
        Inputs {
            url: None,
            image: None,
            tag: None,
            docker: Ok(()),
            local: LocalImage::Current,
        }
    }

    fn container(name: &str, tag: &str, origin: Origin, build: bool) -> Candidate {
        Candidate::Container {
            image: Image::new(name, tag, origin),
            build,
        }
    }

    fn official() -> Candidate {
        container(OFFICIAL_IMAGE, OFFICIAL_TAG, Origin::Official, false)
    }

    #[test]
    fn image_version_comes_from_the_script() {
        let version = image_version();
        assert!(
            !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit()),
            "{version:?}"
        );
        assert!(SCRIPT.contains(&format!("\nIMAGE_VERSION={version}\n")));
        assert_eq!(parse_image_version("a=1\nIMAGE_VERSION=7\n"), Some("7"));
        assert_eq!(parse_image_version("IMAGE_VERSION=\"12\""), Some("12"));
        assert_eq!(parse_image_version("# no version here\n"), None);
    }

    #[test]
    fn a_url_wins_over_everything() {
        let plan = plan(&Inputs {
            url: Some("postgres://x".into()),
            image: Some("other".into()),
            docker: Err("no socket".into()),
            ..inputs()
        });
        assert_eq!(plan.candidates, [Candidate::Url("postgres://x".into())]);
        assert!(plan.ruled_out.is_empty());
    }

    #[test]
    fn a_current_local_image_is_used_then_the_official_one() {
        let plan = plan(&inputs());
        assert_eq!(
            plan.candidates,
            [
                container(LOCAL_IMAGE, LOCAL_TAG, Origin::Local, false),
                official()
            ]
        );
        assert!(plan.ruled_out.is_empty());
    }

    #[test]
    fn a_missing_local_image_is_built_first() {
        let plan = plan(&Inputs {
            local: LocalImage::Buildable,
            tag: Some("15-dev".into()),
            ..inputs()
        });
        assert_eq!(
            plan.candidates,
            [
                container(LOCAL_IMAGE, "15-dev", Origin::Local, true),
                official()
            ]
        );
    }

    #[test]
    fn without_debian_postgres_the_official_image_is_the_only_candidate() {
        let plan = plan(&Inputs {
            local: LocalImage::Unbuildable("no /usr/lib/postgresql/15/bin/postgres".into()),
            ..inputs()
        });
        assert_eq!(plan.candidates, [official()]);
        assert_eq!(plan.ruled_out.len(), 1);
        assert_eq!(plan.ruled_out[0].what, "backfill/postgres:15 (local build)");
        assert!(plan.ruled_out[0].why.contains("/usr/lib/postgresql/15"));
    }

    #[test]
    fn without_docker_nothing_is_tried_and_both_images_say_why() {
        let plan = plan(&Inputs {
            docker: Err("connection refused".into()),
            ..inputs()
        });
        assert!(plan.candidates.is_empty());
        let what: Vec<_> = plan.ruled_out.iter().map(|f| f.what.as_str()).collect();
        assert_eq!(
            what,
            [
                "backfill/postgres:15 (local build)",
                "postgres:15-alpine (official, pulled)"
            ]
        );
        assert!(plan
            .ruled_out
            .iter()
            .all(|f| f.why.contains("connection refused")));
    }

    #[test]
    fn an_image_the_user_names_is_the_only_candidate() {
        let plan = plan(&Inputs {
            image: Some("postgres".into()),
            tag: Some("16".into()),
            local: LocalImage::Unbuildable("irrelevant".into()),
            ..inputs()
        });
        assert_eq!(
            plan.candidates,
            [container("postgres", "16", Origin::Given, false)]
        );
        assert!(plan.ruled_out.is_empty());
    }

    #[test]
    fn the_skip_message_names_every_image_and_its_reason() {
        let message = skip_message(&[
            Failure {
                what: "backfill/postgres:15 (local build)".into(),
                why: "cannot be built here: no postgres".into(),
            },
            Failure {
                what: "postgres:15-alpine (official, pulled)".into(),
                why: "pull access denied".into(),
            },
        ]);
        assert!(message.contains("backfill/postgres:15 (local build): cannot be built here"));
        assert!(message.contains("postgres:15-alpine (official, pulled): pull access denied"));
        assert!(message.contains("BACKFILL_PG_URL"));
    }
}
