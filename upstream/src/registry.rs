//! Registry metadata: which versions a package has, when each was released, and the newest one to follow.
//! npm: the package document (`GET REGISTRY/NAME`, `dist-tags.latest`, `time`). PyPI: the JSON API
//! (`GET BASE/pypi/NAME/json`, `info.version`, each release's upload time), which pypi.org and pypiserver
//! both serve. Requests carry the last ETag and a 304 costs nothing; documents are read under a size cap.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use serde::Deserialize;

use crate::package::{Ecosystem, Package, Version};
use crate::UpstreamError;

/// Largest metadata document read (npm documents of long-lived packages run to tens of MiB).
const MAX_DOCUMENT_BYTES: usize = 64 << 20;

/// Where the registries are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registries {
    /// npm's registry, ending in `/`.
    pub npm: String,
    /// PyPI's base address, ending in `/` (`BASE/simple/` is the index, `BASE/pypi/NAME/json` the metadata).
    pub pypi: String,
    /// The MCP Registry's base address, ending in `/` (`BASE/v0.1/servers/…`).
    pub mcp: String,
}

impl Default for Registries {
    fn default() -> Self {
        Registries {
            npm: "https://registry.npmjs.org/".into(),
            pypi: "https://pypi.org/".into(),
            mcp: "https://registry.modelcontextprotocol.io/".into(),
        }
    }
}

impl Registries {
    pub fn pypi_index(&self) -> String {
        format!("{}simple/", self.pypi)
    }

    fn document_url(&self, package: &Package) -> String {
        match package.ecosystem {
            // A scoped name's `/` is sent encoded, as npm's client does.
            Ecosystem::Npm => format!("{}{}", self.npm, package.name.replace('/', "%2f")),
            Ecosystem::Pypi => format!("{}pypi/{}/json", self.pypi, package.name),
        }
    }
}

/// A released version.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Release {
    pub version: Version,
    pub released_at: Option<DateTime<Utc>>,
}

/// What a registry answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// The document has not changed since the ETag sent.
    NotModified,
    Releases {
        newest: Option<Release>,
        all: Vec<Release>,
        etag: Option<String>,
    },
}

/// Which versions to follow: every release the registry calls newest, or those in a range (npm's
/// semver ranges as Cargo reads them: `^1.2`, `>=1.0, <2`, `1.x`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Follow {
    pub range: Option<semver::VersionReq>,
}

/// Fetches `package`'s document (with `etag`, when one was seen) and picks the newest release to follow.
pub async fn fetch(
    client: &reqwest::Client,
    registries: &Registries,
    package: &Package,
    follow: &Follow,
    etag: Option<&str>,
) -> Result<Fetched, UpstreamError> {
    let url = registries.document_url(package);
    let (body, etag) =
        match get_document(client, &url, etag, MAX_DOCUMENT_BYTES, || package.to_string()).await? {
            Document::NotModified => return Ok(Fetched::NotModified),
            Document::Body { body, etag } => (body, etag),
        };
    let (newest, all) = match package.ecosystem {
        Ecosystem::Npm => npm_releases(&body, follow),
        Ecosystem::Pypi => pypi_releases(&body, follow),
    }
    .map_err(|err| UpstreamError::Registry(format!("{url}: unreadable metadata: {err}")))?;
    Ok(Fetched::Releases { newest, all, etag })
}

/// A registry's JSON answer: unchanged since the ETag sent, or a body with its ETag.
pub(crate) enum Document {
    NotModified,
    Body { body: Vec<u8>, etag: Option<String> },
}

/// GETs `url` (with `etag`, when one was seen), reading at most `max` bytes of the answer; a 404 is
/// `NotFound` of what `what` names, any other failure a `Registry` error naming the address.
pub(crate) async fn get_document(
    client: &reqwest::Client,
    url: &str,
    etag: Option<&str>,
    max: usize,
    what: impl FnOnce() -> String,
) -> Result<Document, UpstreamError> {
    let unreachable = |detail: String| UpstreamError::Registry(format!("{url}: {detail}"));
    let mut request = client.get(url).header("accept", "application/json");
    if let Some(etag) = etag {
        request = request.header("if-none-match", etag);
    }
    let response = request.send().await.map_err(|err| unreachable(err.to_string()))?;
    let status = response.status();
    if status == reqwest::StatusCode::NOT_MODIFIED {
        return Ok(Document::NotModified);
    }
    if status == reqwest::StatusCode::NOT_FOUND {
        return Err(UpstreamError::NotFound(what()));
    }
    if !status.is_success() {
        return Err(unreachable(format!("answered {status}")));
    }
    let etag = response.headers().get("etag").and_then(|value| value.to_str().ok()).map(str::to_owned);
    let body = read_capped(response, max).await.map_err(unreachable)?;
    Ok(Document::Body { body, etag })
}

/// A response's body, refused beyond `max` bytes (read as it arrives, never whole first).
async fn read_capped(response: reqwest::Response, max: usize) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|err| err.to_string())?;
        if body.len() + chunk.len() > max {
            return Err(format!("answer larger than {} MiB", max >> 20));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[derive(Deserialize)]
struct NpmDocument {
    #[serde(default, rename = "dist-tags")]
    dist_tags: BTreeMap<String, String>,
    #[serde(default)]
    versions: BTreeMap<String, serde::de::IgnoredAny>,
    #[serde(default)]
    time: BTreeMap<String, String>,
}

fn timestamp(text: Option<&String>) -> Option<DateTime<Utc>> {
    text.and_then(|text| DateTime::parse_from_rfc3339(text).ok()).map(|time| time.with_timezone(&Utc))
}

/// npm's releases, and the newest to follow: `dist-tags.latest`, or the highest version in the range
/// (prereleases only when the range names one).
pub fn npm_releases(
    body: &[u8],
    follow: &Follow,
) -> Result<(Option<Release>, Vec<Release>), serde_json::Error> {
    let document: NpmDocument = serde_json::from_slice(body)?;
    let release = |version: &str| {
        Version::parse(version)
            .ok()
            .map(|checked| Release { released_at: timestamp(document.time.get(version)), version: checked })
    };
    let all: Vec<Release> = document.versions.keys().filter_map(|version| release(version)).collect();
    let newest = match &follow.range {
        None => document.dist_tags.get("latest").and_then(|latest| release(latest)),
        Some(range) => document
            .versions
            .keys()
            .filter_map(|text| semver::Version::parse(text).ok().map(|parsed| (parsed, text)))
            .filter(|(parsed, _)| range.matches(parsed))
            .max_by(|a, b| a.0.cmp(&b.0))
            .and_then(|(_, text)| release(text)),
    };
    Ok((newest, all))
}

#[derive(Deserialize)]
struct PypiDocument {
    info: PypiInfo,
    #[serde(default)]
    releases: BTreeMap<String, Vec<PypiFile>>,
}

#[derive(Deserialize)]
struct PypiInfo {
    version: String,
}

#[derive(Deserialize)]
struct PypiFile {
    #[serde(default)]
    upload_time_iso_8601: Option<String>,
    #[serde(default)]
    upload_time: Option<String>,
    #[serde(default)]
    yanked: bool,
}

/// PyPI's releases (those with a file not yanked), and the newest: `info.version`, the newest final
/// release; with a range, the highest release it matches read as semver (`1.2` as `1.2.0`).
pub fn pypi_releases(
    body: &[u8],
    follow: &Follow,
) -> Result<(Option<Release>, Vec<Release>), serde_json::Error> {
    let document: PypiDocument = serde_json::from_slice(body)?;
    let uploaded = |files: &[PypiFile]| {
        files
            .iter()
            .filter_map(|file| {
                let text = file.upload_time_iso_8601.as_ref().or(file.upload_time.as_ref())?;
                DateTime::parse_from_rfc3339(text).ok().map(|time| time.with_timezone(&Utc)).or_else(|| {
                    chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
                        .ok()
                        .map(|t| t.and_utc())
                })
            })
            .min()
    };
    let all: Vec<Release> = document
        .releases
        .iter()
        .filter(|(_, files)| files.is_empty() || files.iter().any(|file| !file.yanked))
        .filter_map(|(version, files)| {
            Version::parse(version)
                .ok()
                .map(|checked| Release { version: checked, released_at: uploaded(files) })
        })
        .collect();
    let find = |version: &str| all.iter().find(|release| release.version.as_str() == version).cloned();
    let newest = match &follow.range {
        None => find(&document.info.version).or_else(|| {
            Version::parse(&document.info.version).ok().map(|version| Release { version, released_at: None })
        }),
        Some(range) => all
            .iter()
            .filter_map(|release| loose_semver(release.version.as_str()).map(|parsed| (parsed, release)))
            .filter(|(parsed, _)| range.matches(parsed))
            .max_by(|a, b| a.0.cmp(&b.0))
            .map(|(_, release)| release.clone()),
    };
    Ok((newest, all))
}

/// A PyPI final release read as semver: `1`, `1.2`, `1.2.3` (more parts or any suffix: not matched).
fn loose_semver(text: &str) -> Option<semver::Version> {
    let parts: Vec<u64> = text.split('.').map(|part| part.parse().ok()).collect::<Option<_>>()?;
    match parts.as_slice() {
        [major] => Some(semver::Version::new(*major, 0, 0)),
        [major, minor] => Some(semver::Version::new(*major, *minor, 0)),
        [major, minor, patch] => Some(semver::Version::new(*major, *minor, *patch)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(text: &str) -> Follow {
        Follow { range: Some(semver::VersionReq::parse(text).unwrap()) }
    }

    fn check_npm(body: &str, follow: Follow, expected: Option<&str>) {
        let (newest, _) = npm_releases(body.as_bytes(), &follow).unwrap();
        assert_eq!(newest.as_ref().map(|r| r.version.as_str()), expected, "{body}");
    }

    const NPM: &str = r#"{"dist-tags":{"latest":"1.2.0","next":"2.0.0-rc.1"},
        "versions":{"1.0.0":{},"1.2.0":{},"1.3.0-beta":{},"2.0.0-rc.1":{},"../x":{}},
        "time":{"1.2.0":"2026-12-01T10:00:00.000Z","modified":"x"}}"#;

    #[test]
    fn npm_newest() {
        check_npm(NPM, Follow::default(), Some("1.2.0"));
        check_npm(NPM, range("^1.0"), Some("1.2.0"));
        check_npm(NPM, range("<1.2"), Some("1.0.0"));
        check_npm(NPM, range(">=3"), None);
        check_npm(r#"{"versions":{}}"#, Follow::default(), None);
        let (newest, all) = npm_releases(NPM.as_bytes(), &Follow::default()).unwrap();
        assert_eq!(newest.unwrap().released_at.unwrap().to_rfc3339(), "2026-12-01T10:00:00+00:00");
        assert_eq!(all.len(), 4, "the unsafe version is left out");
        assert!(npm_releases(b"[1]", &Follow::default()).is_err());
    }

    #[test]
    fn pypi_newest() {
        let body = r#"{"info":{"version":"1.1.0"},"releases":{
            "1.0.0":[{"upload_time_iso_8601":"2026-11-01T09:00:00.123456Z","yanked":false}],
            "1.1.0":[{"upload_time":"2026-12-01T09:00:00","yanked":false}],
            "1.2.0":[{"upload_time_iso_8601":"2026-12-02T09:00:00Z","yanked":true}],
            "2.0a1":[{"yanked":false}]}}"#;
        let (newest, all) = pypi_releases(body.as_bytes(), &Follow::default()).unwrap();
        let newest = newest.unwrap();
        assert_eq!(newest.version.as_str(), "1.1.0");
        assert_eq!(newest.released_at.unwrap().to_rfc3339(), "2026-12-01T09:00:00+00:00");
        assert_eq!(all.iter().map(|r| r.version.as_str()).collect::<Vec<_>>(), ["1.0.0", "1.1.0", "2.0a1"]);
        let (newest, _) = pypi_releases(body.as_bytes(), &range("<1.1")).unwrap();
        assert_eq!(newest.unwrap().version.as_str(), "1.0.0");
    }

    #[test]
    fn urls() {
        let registries = Registries::default();
        let npm = Package::new(Ecosystem::Npm, "@scope/name").unwrap();
        assert_eq!(registries.document_url(&npm), "https://registry.npmjs.org/@scope%2fname");
        let pypi = Package::new(Ecosystem::Pypi, "mcp-server-fetch").unwrap();
        assert_eq!(registries.document_url(&pypi), "https://pypi.org/pypi/mcp-server-fetch/json");
        assert_eq!(registries.pypi_index(), "https://pypi.org/simple/");
    }
}
