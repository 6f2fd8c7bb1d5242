//! What a package is called: `npm:@scope/name[@VERSION]` or `pypi:name[@VERSION]` (also `pypi:name==VERSION`),
//! checked before any name or version reaches a URL, a command line or a directory name; and what a watched
//! entry follows: such a package, or a server on an MCP Registry (`mcp-registry:NAMESPACE/NAME`).

use std::fmt;
use std::str::FromStr;

/// The registry a package is published on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ecosystem {
    Npm,
    Pypi,
}

impl Ecosystem {
    pub fn as_str(self) -> &'static str {
        match self {
            Ecosystem::Npm => "npm",
            Ecosystem::Pypi => "pypi",
        }
    }
}

/// A package on a registry, checked.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Package {
    pub ecosystem: Ecosystem,
    pub name: String,
}

/// A package and, where given, one version of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageSpec {
    pub package: Package,
    pub version: Option<Version>,
}

/// A version as the registry spells it, checked to be safe in a path, a URL and an install argument.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct Version(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("{0:?}: expected npm:NAME, npm:@SCOPE/NAME, pypi:NAME or mcp-registry:NAMESPACE/NAME, optionally with @VERSION")]
    Form(String),
    #[error(
        "{0:?} is not a valid npm package name (lowercase letters, digits, - . _ ~, an optional @scope/)"
    )]
    NpmName(String),
    #[error("{0:?} is not a valid PyPI project name (letters, digits, - . _, starting and ending with a letter or digit)")]
    PypiName(String),
    #[error("{0:?} is not a version (letters, digits and . + - _ !, at most 64 characters)")]
    Version(String),
}

const MAX_NAME: usize = 214;
const MAX_VERSION: usize = 64;

impl Version {
    pub fn parse(text: &str) -> Result<Version, SpecError> {
        let ok = !text.is_empty()
            && text.len() <= MAX_VERSION
            && text.as_bytes()[0].is_ascii_alphanumeric()
            && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-._!".contains(&b))
            && !text.contains("..");
        if ok {
            Ok(Version(text.to_owned()))
        } else {
            Err(SpecError::Version(text.to_owned()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn npm_part_ok(part: &str) -> bool {
    !part.is_empty()
        && part.as_bytes()[0].is_ascii_alphanumeric()
        && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._~".contains(&b))
}

impl Package {
    pub fn new(ecosystem: Ecosystem, name: &str) -> Result<Package, SpecError> {
        let ok = match ecosystem {
            Ecosystem::Npm => {
                name.len() <= MAX_NAME
                    && match name.strip_prefix('@') {
                        Some(scoped) => scoped
                            .split_once('/')
                            .is_some_and(|(scope, rest)| npm_part_ok(scope) && npm_part_ok(rest)),
                        None => npm_part_ok(name),
                    }
            }
            Ecosystem::Pypi => {
                let bytes = name.as_bytes();
                !name.is_empty()
                    && name.len() <= MAX_NAME
                    && bytes[0].is_ascii_alphanumeric()
                    && bytes[bytes.len() - 1].is_ascii_alphanumeric()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
            }
        };
        match (ok, ecosystem) {
            (true, _) => Ok(Package { ecosystem, name: name.to_owned() }),
            (false, Ecosystem::Npm) => Err(SpecError::NpmName(name.to_owned())),
            (false, Ecosystem::Pypi) => Err(SpecError::PypiName(name.to_owned())),
        }
    }

    /// How an install command names one version of the package, and how advice names the pin:
    /// `@scope/name@1.2.3`, `name==1.2.3`.
    pub fn pinned(&self, version: &Version) -> String {
        match self.ecosystem {
            Ecosystem::Npm => format!("{}@{version}", self.name),
            Ecosystem::Pypi => format!("{}=={version}", self.name),
        }
    }

    /// A directory name for the package: no `/`, never `.` or `..`, one per package (a scope's `/` becomes
    /// `+`, which no npm name holds).
    pub fn directory_name(&self) -> String {
        format!("{}-{}", self.ecosystem.as_str(), self.name.replace('/', "+"))
    }
}

impl fmt::Display for Package {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.ecosystem.as_str(), self.name)
    }
}

/// What a watched entry follows: a package, or a server on an MCP Registry, followed to the package its
/// newest version names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    Package(Package),
    McpRegistry(crate::mcp_registry::RegistryName),
}

const MCP_REGISTRY_PREFIX: &str = "mcp-registry:";

impl Source {
    /// The registry asked, as metrics and logs name it.
    pub fn registry(&self) -> &'static str {
        match self {
            Source::Package(package) => package.ecosystem.as_str(),
            Source::McpRegistry(_) => "mcp-registry",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Package(package) => package.fmt(f),
            Source::McpRegistry(name) => write!(f, "{MCP_REGISTRY_PREFIX}{name}"),
        }
    }
}

impl FromStr for Source {
    type Err = SpecError;

    fn from_str(text: &str) -> Result<Source, SpecError> {
        match text.trim().strip_prefix(MCP_REGISTRY_PREFIX) {
            Some(name) => {
                name.parse().map(Source::McpRegistry).map_err(|err| SpecError::Form(err.to_string()))
            }
            None => text.parse().map(Source::Package),
        }
    }
}

/// A source and, where given, one version: a package's, or a server version on the MCP Registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSpec {
    Package(PackageSpec),
    McpRegistry { name: crate::mcp_registry::RegistryName, version: Option<Version> },
}

impl FromStr for SourceSpec {
    type Err = SpecError;

    fn from_str(text: &str) -> Result<SourceSpec, SpecError> {
        let Some(rest) = text.trim().strip_prefix(MCP_REGISTRY_PREFIX) else {
            return text.parse().map(SourceSpec::Package);
        };
        let (name, version) = match rest.split_once('@') {
            Some((name, version)) => (name, Some(Version::parse(version)?)),
            None => (rest, None),
        };
        let name = name
            .parse()
            .map_err(|err: crate::mcp_registry::RegistryNameError| SpecError::Form(err.to_string()))?;
        Ok(SourceSpec::McpRegistry { name, version })
    }
}

impl FromStr for PackageSpec {
    type Err = SpecError;

    fn from_str(text: &str) -> Result<PackageSpec, SpecError> {
        let text = text.trim();
        let (ecosystem, rest) = if let Some(rest) = text.strip_prefix("npm:") {
            (Ecosystem::Npm, rest)
        } else if let Some(rest) = text.strip_prefix("pypi:") {
            (Ecosystem::Pypi, rest)
        } else {
            return Err(SpecError::Form(text.to_owned()));
        };
        // The version follows the last `@` that is not the scope's; PyPI also takes `==`.
        let (name, version) = match ecosystem {
            Ecosystem::Npm => match rest.get(1..).and_then(|tail| tail.rfind('@')) {
                Some(at) => (&rest[..at + 1], Some(&rest[at + 2..])),
                None => (rest, None),
            },
            Ecosystem::Pypi => match rest.split_once("==").or_else(|| rest.split_once('@')) {
                Some((name, version)) => (name, Some(version)),
                None => (rest, None),
            },
        };
        Ok(PackageSpec {
            package: Package::new(ecosystem, name)?,
            version: version.map(Version::parse).transpose()?,
        })
    }
}

impl FromStr for Package {
    type Err = SpecError;

    fn from_str(text: &str) -> Result<Package, SpecError> {
        let spec: PackageSpec = text.parse()?;
        match spec.version {
            None => Ok(spec.package),
            Some(_) => Err(SpecError::Form(format!("{text} (a package to follow takes no version)"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: Result<(&str, Option<&str>), &str>) {
        match (text.parse::<PackageSpec>(), expected) {
            (Ok(spec), Ok((name, version))) => {
                assert_eq!(spec.package.to_string(), name, "{text}");
                assert_eq!(spec.version.as_ref().map(Version::as_str), version, "{text}");
            }
            (Err(err), Err(part)) => assert!(err.to_string().contains(part), "{text}: {err} lacks {part:?}"),
            (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn specs() {
        check("npm:@scope/name", Ok(("npm:@scope/name", None)));
        check("npm:@scope/name@1.2.3", Ok(("npm:@scope/name", Some("1.2.3"))));
        check("npm:name@2026.1.0-rc.1", Ok(("npm:name", Some("2026.1.0-rc.1"))));
        check("npm:server-filesystem", Ok(("npm:server-filesystem", None)));
        check("pypi:mcp-server-fetch", Ok(("pypi:mcp-server-fetch", None)));
        check("pypi:mcp-server-fetch==2025.4.7", Ok(("pypi:mcp-server-fetch", Some("2025.4.7"))));
        check("pypi:Mcp_Server.x@1.0", Ok(("pypi:Mcp_Server.x", Some("1.0"))));
        check("cargo:x", Err("expected npm:NAME"));
        check("npm:@scope", Err("not a valid npm package name"));
        check("npm:../etc", Err("not a valid npm package name"));
        check("npm:@scope/../x", Err("not a valid npm package name"));
        check("npm:Upper", Err("not a valid npm package name"));
        check("npm:a/b", Err("not a valid npm package name"));
        check("npm:x@../../etc", Err("is not a version"));
        check("npm:x@1.0;rm -rf", Err("is not a version"));
        check("npm:x@", Err("is not a version"));
        check("pypi:-x", Err("not a valid PyPI project name"));
        check("pypi:x/y", Err("not a valid PyPI project name"));
        check("pypi:x==1 --index-url=http://evil", Err("is not a version"));
        check("npm:x@--registry=http://evil", Err("is not a version"));
    }

    #[test]
    fn sources() {
        let check =
            |text: &str, expected: Result<(&str, &str), &str>| match (text.parse::<Source>(), expected) {
                (Ok(source), Ok((shown, registry))) => {
                    assert_eq!((source.to_string().as_str(), source.registry()), (shown, registry), "{text}")
                }
                (Err(err), Err(part)) => assert!(err.to_string().contains(part), "{text}: {err}"),
                (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
            };
        check("npm:@scope/name", Ok(("npm:@scope/name", "npm")));
        check(
            "mcp-registry:io.github.owner/server",
            Ok(("mcp-registry:io.github.owner/server", "mcp-registry")),
        );
        check("mcp-registry:../etc", Err("not an MCP Registry server name"));
        check("mcp-registry:a/b/c", Err("not an MCP Registry server name"));
        check("npm:x@1", Err("takes no version"));
        let spec: SourceSpec = "mcp-registry:io.github.owner/server@1.2.0".parse().unwrap();
        assert!(
            matches!(spec, SourceSpec::McpRegistry { version: Some(ref v), .. } if v.as_str() == "1.2.0")
        );
        assert!("mcp-registry:io.github.owner/server@../x".parse::<SourceSpec>().is_err());
        assert!(matches!("pypi:x==1".parse::<SourceSpec>(), Ok(SourceSpec::Package(_))));
    }

    #[test]
    fn pins_and_directories() {
        let spec: PackageSpec = "npm:@scope/name@1.2.3".parse().unwrap();
        let version = spec.version.unwrap();
        assert_eq!(spec.package.pinned(&version), "@scope/name@1.2.3");
        assert_eq!(spec.package.directory_name(), "npm-@scope+name");
        let spec: PackageSpec = "pypi:mcp-server-fetch==1.0".parse().unwrap();
        assert_eq!(spec.package.pinned(&spec.version.unwrap()), "mcp-server-fetch==1.0");
        assert!("npm:x@1".parse::<Package>().is_err());
    }

    proptest::proptest! {
        /// Whatever is accepted is safe as one path component and one argument.
        #[test]
        fn accepted_names_are_safe(text in "(npm|pypi):[@a-zA-Z0-9./_~=-]{0,24}") {
            if let Ok(spec) = text.parse::<PackageSpec>() {
                let dir = spec.package.directory_name();
                proptest::prop_assert!(!dir.contains('/') && dir != "." && dir != "..");
                if let Some(version) = &spec.version {
                    proptest::prop_assert!(!version.as_str().starts_with('-') && !version.as_str().contains('/'));
                }
                proptest::prop_assert!(!spec.package.name.starts_with('-'));
            }
        }
    }
}
