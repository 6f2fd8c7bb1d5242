//! The MCP Registry (`registry.modelcontextprotocol.io`, or any registry speaking its API): a server's
//! versions (`GET BASE/v0.1/servers/{name}/versions`), each a `server.json` naming the npm or PyPI package
//! (and its version) that runs it. The registry holds no tool list: a version is followed to its package,
//! which is installed and captured like any other.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::package::{Ecosystem, Package, Version};
use crate::registry::{get_document, Document, Follow, Release};
use crate::UpstreamError;

/// A server's name on an MCP Registry: a reverse-DNS namespace, `/`, a name (`io.github.owner/server`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegistryName(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an MCP Registry server name (NAMESPACE/NAME: letters, digits, . - _, one /)")]
pub struct RegistryNameError(String);

const MAX_NAME: usize = 200;

impl FromStr for RegistryName {
    type Err = RegistryNameError;

    fn from_str(text: &str) -> Result<RegistryName, RegistryNameError> {
        let part_ok = |part: &str| {
            !part.is_empty()
                && part.as_bytes()[0].is_ascii_alphanumeric()
                && part.as_bytes()[part.len() - 1].is_ascii_alphanumeric()
                && part.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
                && !part.contains("..")
        };
        match text.split_once('/') {
            Some((namespace, name)) if text.len() <= MAX_NAME && part_ok(namespace) && part_ok(name) => {
                Ok(RegistryName(text.to_owned()))
            }
            _ => Err(RegistryNameError(text.to_owned())),
        }
    }
}

impl RegistryName {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The versions' address: the name's `/` encoded, as the registry's clients send it.
    pub fn versions_url(&self, base: &str) -> String {
        format!("{base}v0.1/servers/{}/versions", self.0.replace('/', "%2F"))
    }
}

impl fmt::Display for RegistryName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A server version on the registry, followed to the package release that runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryRelease {
    /// The server's own version in its `server.json`.
    pub server_version: String,
    pub package: Package,
    /// The package's version, released when the registry published the server version.
    pub release: Release,
    /// The arguments `server.json` gives the package (positional values and defaults, named arguments
    /// with a value), for a command that names none.
    pub arguments: Vec<String>,
}

#[derive(Deserialize)]
struct VersionList {
    #[serde(default)]
    servers: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    server: ServerJson,
    #[serde(default, rename = "_meta")]
    meta: Option<Meta>,
}

#[derive(Deserialize)]
struct Meta {
    #[serde(default, rename = "io.modelcontextprotocol.registry/official")]
    official: Option<Official>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Official {
    #[serde(default)]
    published_at: Option<String>,
    #[serde(default)]
    is_latest: bool,
    #[serde(default)]
    status: Option<String>,
}

#[derive(Deserialize)]
struct ServerJson {
    version: String,
    #[serde(default)]
    packages: Vec<PackageJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PackageJson {
    registry_type: String,
    identifier: String,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    transport: Option<Transport>,
    #[serde(default)]
    package_arguments: Vec<Argument>,
}

#[derive(Deserialize)]
struct Transport {
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct Argument {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    default: Option<String>,
}

impl Entry {
    fn published_at(&self) -> Option<DateTime<Utc>> {
        let text = self.meta.as_ref()?.official.as_ref()?.published_at.as_ref()?;
        DateTime::parse_from_rfc3339(text).ok().map(|time| time.with_timezone(&Utc))
    }

    fn is_latest(&self) -> bool {
        self.meta.as_ref().and_then(|meta| meta.official.as_ref()).is_some_and(|official| official.is_latest)
    }

    fn deleted(&self) -> bool {
        self.meta
            .as_ref()
            .and_then(|meta| meta.official.as_ref())
            .and_then(|official| official.status.as_deref())
            .is_some_and(|status| status == "deleted")
    }

    /// The version followed to its first npm or PyPI package started over stdio.
    fn release(&self) -> Option<RegistryRelease> {
        self.server.packages.iter().find_map(|package| {
            let ecosystem = match package.registry_type.as_str() {
                "npm" => Ecosystem::Npm,
                "pypi" => Ecosystem::Pypi,
                _ => return None,
            };
            if package.transport.as_ref().is_some_and(|transport| transport.kind != "stdio") {
                return None;
            }
            let name = Package::new(ecosystem, &package.identifier).ok()?;
            let version = Version::parse(package.version.as_deref()?).ok()?;
            let arguments = package
                .package_arguments
                .iter()
                .flat_map(|argument| {
                    let value = argument.value.clone().or_else(|| argument.default.clone());
                    match (argument.kind.as_str(), &argument.name, value) {
                        ("positional", _, Some(value)) => vec![value],
                        ("named", Some(name), Some(value)) => vec![name.clone(), value],
                        _ => Vec::new(),
                    }
                })
                .collect();
            Some(RegistryRelease {
                server_version: self.server.version.clone(),
                package: name,
                release: Release { version, released_at: self.published_at() },
                arguments,
            })
        })
    }
}

/// The server version to follow from a `versions` answer: `wanted` (a server version), else the
/// newest in `follow`'s range (by the package's version), else the one the registry marks latest. Versions
/// without an npm or PyPI package started over stdio, and deleted ones, are passed over.
pub fn read_versions(
    body: &[u8],
    follow: &Follow,
    wanted: Option<&str>,
) -> Result<Option<RegistryRelease>, serde_json::Error> {
    let list: VersionList = serde_json::from_slice(body)?;
    let usable: Vec<(&Entry, RegistryRelease)> = list
        .servers
        .iter()
        .filter(|entry| !entry.deleted())
        .filter_map(|entry| entry.release().map(|release| (entry, release)))
        .collect();
    let chosen = match (wanted, &follow.range) {
        (Some(wanted), _) => usable.into_iter().find(|(_, release)| release.server_version == wanted),
        (None, Some(range)) => usable
            .into_iter()
            .filter_map(|(entry, release)| {
                let parsed = semver::Version::parse(release.release.version.as_str()).ok()?;
                range.matches(&parsed).then_some((parsed, entry, release))
            })
            .max_by(|a, b| a.0.cmp(&b.0))
            .map(|(_, entry, release)| (entry, release)),
        (None, None) => {
            let latest = usable.iter().position(|(entry, _)| entry.is_latest());
            match latest {
                Some(index) => usable.into_iter().nth(index),
                None => usable.into_iter().last(),
            }
        }
    };
    Ok(chosen.map(|(_, release)| release))
}

/// What the registry answered for one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryFetched {
    NotModified,
    Release { release: Option<RegistryRelease>, etag: Option<String> },
}

/// Largest versions answer read.
const MAX_ANSWER_BYTES: usize = 16 << 20;

/// Asks `base` (ending in `/`) for `name`'s versions (with `etag`) and picks the one to follow.
pub async fn fetch(
    client: &reqwest::Client,
    base: &str,
    name: &RegistryName,
    follow: &Follow,
    wanted: Option<&str>,
    etag: Option<&str>,
) -> Result<RegistryFetched, UpstreamError> {
    let url = name.versions_url(base);
    let (body, etag) =
        match get_document(client, &url, etag, MAX_ANSWER_BYTES, || format!("mcp-registry:{name}")).await? {
            Document::NotModified => return Ok(RegistryFetched::NotModified),
            Document::Body { body, etag } => (body, etag),
        };
    let release = read_versions(&body, follow, wanted)
        .map_err(|err| UpstreamError::Registry(format!("{url}: unreadable versions: {err}")))?;
    Ok(RegistryFetched::Release { release, etag })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in
            ["io.github.owner/server", "io.modelcontextprotocol.anonymous/weather", "com.example/a_b-c.d"]
        {
            assert_eq!(good.parse::<RegistryName>().map(|n| n.to_string()), Ok(good.to_owned()));
        }
        for bad in ["noslash", "a/b/c", "../x", "a/..", "a/.x", "", "a/", "/b", "a b/c", "a/b?x=1", "a/b#c"] {
            assert!(bad.parse::<RegistryName>().is_err(), "{bad}");
        }
        let name: RegistryName = "io.github.owner/server".parse().unwrap();
        assert_eq!(
            name.versions_url("https://registry.modelcontextprotocol.io/"),
            "https://registry.modelcontextprotocol.io/v0.1/servers/io.github.owner%2Fserver/versions"
        );
    }

    fn entry(version: &str, package: &str, latest: bool, status: &str) -> String {
        format!(
            r#"{{"server": {{"name": "io.github.o/s", "version": "{version}", "packages": [{package}]}},
                "_meta": {{"io.modelcontextprotocol.registry/official": {{"status": "{status}",
                "publishedAt": "2026-12-0{}T10:00:00Z", "isLatest": {latest}}}}}}}"#,
            version.len() % 9 + 1
        )
    }

    fn npm(version: &str) -> String {
        format!(
            r#"{{"registryType": "npm", "identifier": "@o/s", "version": "{version}", "transport": {{"type": "stdio"}},
                "packageArguments": [{{"type": "positional", "valueHint": "dir"}}, {{"type": "positional", "default": "/tmp"}},
                {{"type": "named", "name": "--port", "value": "8080"}}, {{"type": "named", "name": "--flag"}}]}}"#
        )
    }

    fn check(body: &str, follow: Follow, wanted: Option<&str>, expected: Option<(&str, &str)>) {
        let release = read_versions(body.as_bytes(), &follow, wanted).unwrap();
        let got = release.as_ref().map(|r| (r.server_version.as_str(), r.release.version.as_str()));
        assert_eq!(got, expected, "{body}");
    }

    #[test]
    fn versions_followed_to_their_package() {
        let docker =
            r#"{"registryType": "oci", "identifier": "docker.io/o/s:1", "transport": {"type": "stdio"}}"#;
        let body = format!(
            r#"{{"servers": [{}, {}, {}, {}], "metadata": {{"count": 4}}}}"#,
            entry("1.0.0", &npm("1.0.0"), false, "active"),
            entry("1.1.0", &npm("1.1.0"), true, "active"),
            entry("2.0.0", docker, false, "active"),
            entry("1.2.0", &npm("1.2.0"), false, "deleted"),
        );
        check(&body, Follow::default(), None, Some(("1.1.0", "1.1.0")));
        check(&body, Follow::default(), Some("1.0.0"), Some(("1.0.0", "1.0.0")));
        check(&body, Follow::default(), Some("2.0.0"), None);
        let range = |text: &str| Follow { range: Some(semver::VersionReq::parse(text).unwrap()) };
        check(&body, range("<1.1"), None, Some(("1.0.0", "1.0.0")));
        check(&body, range(">=3"), None, None);
        // Without a latest mark, the last listed.
        let body = format!(r#"{{"servers": [{}]}}"#, entry("1.0.0", &npm("1.0.0"), false, "active"));
        check(&body, Follow::default(), None, Some(("1.0.0", "1.0.0")));
        let release = read_versions(body.as_bytes(), &Follow::default(), None).unwrap().unwrap();
        assert_eq!(release.package.to_string(), "npm:@o/s");
        assert_eq!(release.arguments, ["/tmp", "--port", "8080"]);
        assert!(release.release.released_at.is_some());
        // A package name or version that is not safe is passed over.
        let unsafe_name = r#"{"registryType": "npm", "identifier": "../x", "version": "1.0.0"}"#;
        let unsafe_version = r#"{"registryType": "pypi", "identifier": "x", "version": "1; rm -rf /"}"#;
        for package in [unsafe_name, unsafe_version] {
            let body = format!(r#"{{"servers": [{}]}}"#, entry("1.0.0", package, true, "active"));
            check(&body, Follow::default(), None, None);
        }
        assert!(read_versions(br#"{"servers": 3}"#, &Follow::default(), None).is_err());
    }

    /// The official registry's own answer (v1.8.14, recorded by `scripts/mcp-registry.sh`'s fixtures).
    #[test]
    fn the_official_registrys_answer() {
        let body = include_str!("../../tests/upstream/mcp-registry/responses/versions.json");
        let newest = read_versions(body.as_bytes(), &Follow::default(), None).unwrap().unwrap();
        assert_eq!(newest.server_version, "1.1.0");
        assert_eq!(newest.package.to_string(), "npm:@driftline-test/weather-server");
        assert_eq!(newest.release.version.as_str(), "1.1.0");
        assert!(newest.release.released_at.is_some());
        let older = read_versions(body.as_bytes(), &Follow::default(), Some("1.0.0")).unwrap().unwrap();
        assert_eq!(older.release.version.as_str(), "1.0.0");
    }
}
