//! A server's releases as the upstream watcher captured them, in the words `health --wide` and
//! `upstream list` share: the release in use (its list is the server's) and the newest with its verdict.

use driftline_schemas::UpcomingRelease;

/// A server's releases as the upstream watcher captured them: the one whose list is the server's current
/// list (the version in use, as far as its list tells), and the newest seen with its verdict.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReleaseSummary {
    pub in_use: Option<String>,
    pub newest: Option<String>,
    pub verdict: Option<String>,
}

pub fn release_summary(
    schema_hash: Option<&str>,
    server: &str,
    releases: &[UpcomingRelease],
) -> ReleaseSummary {
    let of_server: Vec<&UpcomingRelease> = releases.iter().filter(|r| r.server_name == server).collect();
    let in_use = schema_hash
        .and_then(|hash| of_server.iter().find(|r| r.error.is_none() && r.release_hash == hash))
        .map(|r| r.version.clone());
    let newest = of_server.first();
    let verdict = newest.map(|r| match (&r.error, r.max_classification) {
        (Some(_), _) => "not captured".to_owned(),
        (None, Some(worst)) => worst.as_str().to_owned(),
        (None, None) => "no change".to_owned(),
    });
    ReleaseSummary { in_use, newest: newest.map(|r| r.version.clone()), verdict }
}

pub fn release_column(summary: &ReleaseSummary) -> String {
    match (&summary.in_use, &summary.newest, &summary.verdict) {
        (_, None, _) => "-".into(),
        (Some(in_use), Some(newest), _) if in_use == newest => format!("{in_use} (newest)"),
        (in_use, Some(newest), verdict) => {
            format!("{} → {newest} ({})", in_use.as_deref().unwrap_or("?"), verdict.as_deref().unwrap_or("-"))
        }
    }
}
