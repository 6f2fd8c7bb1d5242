//! Project, server and tool names as validated types, and the composite keys built from them.
//!
//! A name is checked once, where it enters (configuration, ingest, the API, a record read from the bus),
//! and is then a value of its type: nothing downstream can hold an unchecked one. Keys are structs of
//! names; their string form (`project/server[/tool]`) is for the bus and the store only, and it reads back
//! unambiguously because neither a project nor a server name can hold a `/`.

use std::borrow::Borrow;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Why a string is not a name. The message quotes at most 64 characters of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} name {shown:?}: {rule}")]
pub struct NameError {
    kind: &'static str,
    shown: String,
    rule: &'static str,
}

impl NameError {
    fn new(kind: &'static str, name: &str, rule: &'static str) -> Self {
        NameError { kind, shown: name.chars().take(64).collect(), rule }
    }
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $rule:literal, $valid:expr) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema)]
        #[serde(try_from = "String", into = "String")]
        #[schema(value_type = String)]
        pub struct $name(String);

        impl $name {
            /// What a valid name looks like, for messages and documentation.
            pub const RULE: &'static str = $rule;

            pub fn parse(name: impl Into<String>) -> Result<Self, NameError> {
                let name = name.into();
                let valid: fn(&str) -> bool = $valid;
                // `.` and `..` are path segments to every browser and proxy: the dashboard and API could
                // not reach a thing so named.
                if valid(&name) && name != "." && name != ".." {
                    Ok($name(name))
                } else {
                    Err(NameError::new($kind, &name, $rule))
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = NameError;
            fn try_from(name: String) -> Result<Self, NameError> {
                $name::parse(name)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = NameError;
            fn try_from(name: &str) -> Result<Self, NameError> {
                $name::parse(name)
            }
        }

        impl std::str::FromStr for $name {
            type Err = NameError;
            fn from_str(name: &str) -> Result<Self, NameError> {
                $name::parse(name)
            }
        }

        impl From<$name> for String {
            fn from(name: $name) -> String {
                name.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        /// Quoted like the string it is: messages that quote a name (`{name:?}`) never show the type.
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
    };
}

name_type!(
    /// A project: 1-128 of `A-Z a-z 0-9 . _ -`, not `.` or `..`. Never a `/`: keys begin `project/`.
    ProjectName,
    "project",
    "use 1-128 characters from A-Z a-z 0-9 . _ - (not . or ..)",
    |name| {
        !name.is_empty()
            && name.len() <= 128
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    }
);

name_type!(
    /// A server: 1-256 of `A-Z a-z 0-9 . _ : @ -`, not `.` or `..` (it appears in keys, paths and topics).
    ServerName,
    "server",
    "use 1-256 characters from A-Z a-z 0-9 . _ : @ - (not . or ..)",
    |name| {
        !name.is_empty()
            && name.len() <= 256
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'@' | b'-'))
    }
);

name_type!(
    /// A tool: what the server declares, 1-256 bytes without control characters, not `.` or `..`. Wider
    /// than the MCP spec's SHOULD (A-Z a-z 0-9 _ - .): driftline watches real servers, which do not all follow
    /// it. Always the last part of a key, so it may hold a `/`.
    ToolName,
    "tool",
    "use 1-256 bytes without control characters (not . or ..)",
    |name| !name.is_empty() && name.len() <= 256 && !name.chars().any(char::is_control)
);

impl ProjectName {
    /// `default`: the project of a keyless installation and of the CLI's defaults.
    pub fn default_project() -> Self {
        ProjectName("default".to_owned())
    }
}

/// A server of a project: the key of its tool lists, probe results and baseline.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerKey {
    pub project: ProjectName,
    pub server: ServerName,
}

/// A tool of a server of a project: the key of its calls and return-shape baseline.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ToolKey {
    pub project: ProjectName,
    pub server: ServerName,
    pub tool: ToolName,
}

/// Servers and tools one project may hold detector state for in one detector process
/// (`limits.max_servers_per_project`, `limits.max_tools_per_project`): every key seen keeps state in memory,
/// and a key is made by whoever names it. `state_bytes` (`limits.max_state_bytes_per_project`) bounds
/// the tools' state in bytes: a project holds at most as many tools as fit it at their worst case under
/// the project's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyLimits {
    pub servers: usize,
    pub tools: usize,
    pub state_bytes: u64,
}

impl Default for KeyLimits {
    fn default() -> Self {
        KeyLimits { servers: 2_000, tools: 20_000, state_bytes: 1 << 30 }
    }
}

/// Tool-list work each project may send through ingest (`limits.tool_list_work_per_second`,
/// `limits.tool_list_work_burst`), in bytes of schema the detector reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListWorkLimits {
    pub per_second: u64,
    pub burst: u64,
}

impl Default for ListWorkLimits {
    fn default() -> Self {
        ListWorkLimits { per_second: 1 << 20, burst: 32 << 20 }
    }
}

/// A stored or published key that does not read back as names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("key {0:?} is not project/server[/tool]")]
    Shape(String),
    #[error(transparent)]
    Name(#[from] NameError),
}

impl ServerKey {
    pub fn new(project: ProjectName, server: ServerName) -> Self {
        ServerKey { project, server }
    }

    /// Reads the string form back; each part must be a valid name.
    pub fn parse(key: &str) -> Result<Self, KeyError> {
        let (project, server) = key.split_once('/').ok_or_else(|| KeyError::Shape(shown(key)))?;
        Ok(ServerKey { project: ProjectName::parse(project)?, server: ServerName::parse(server)? })
    }

    pub fn tool(&self, tool: ToolName) -> ToolKey {
        ToolKey { project: self.project.clone(), server: self.server.clone(), tool }
    }
}

impl ToolKey {
    /// Reads the string form back; each part must be a valid name (the tool is everything after the
    /// server, `/`s included).
    pub fn parse(key: &str) -> Result<Self, KeyError> {
        let (project, rest) = key.split_once('/').ok_or_else(|| KeyError::Shape(shown(key)))?;
        let (server, tool) = rest.split_once('/').ok_or_else(|| KeyError::Shape(shown(key)))?;
        Ok(ToolKey {
            project: ProjectName::parse(project)?,
            server: ServerName::parse(server)?,
            tool: ToolName::parse(tool)?,
        })
    }

    pub fn server_key(&self) -> ServerKey {
        ServerKey { project: self.project.clone(), server: self.server.clone() }
    }
}

fn shown(key: &str) -> String {
    key.chars().take(200).collect()
}

impl fmt::Display for ServerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.project, self.server)
    }
}

impl fmt::Display for ToolKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.project, self.server, self.tool)
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_name_quoted_in_a_message_reads_as_the_string() {
        let server = ServerName::parse("srv-1").expect("name");
        assert_eq!(format!("server {server:?}"), "server \"srv-1\"");
        assert_eq!(format!("{:?}", ToolName::parse("say \"hi\"").expect("name")), "\"say \\\"hi\\\"\"");
    }

    fn check<T: std::fmt::Debug>(parse: fn(&str) -> Result<T, NameError>, name: &str, valid: bool) {
        let parsed = parse(name);
        assert_eq!(parsed.is_ok(), valid, "{name:?}: {parsed:?}");
        if let Err(err) = parsed {
            assert!(err.to_string().len() < 200, "the message quotes a bounded part: {err}");
        }
    }

    #[test]
    fn project_names() {
        for good in ["default", "team-a", "a.b_c", "A1", "..."] {
            check(ProjectName::from_str, good, true);
        }
        for bad in ["", "a/b", ".", "..", "a b", "é", "a:b", &"x".repeat(129)] {
            check(ProjectName::from_str, bad, false);
        }
    }

    #[test]
    fn server_names() {
        for good in ["srv", "github-mcp", "npm:@scope/pkg".replace('/', "_").as_str(), "a.b@1:2"] {
            check(ServerName::from_str, good, true);
        }
        for bad in ["", "a/b", ".", "..", "a b", "a%2Fb", "x\n", &"x".repeat(257)] {
            check(ServerName::from_str, bad, false);
        }
    }

    #[test]
    fn tool_names() {
        for good in ["search", "repo/list", "ünïcode", "a b", "..a", &"t".repeat(256)] {
            check(ToolName::from_str, good, true);
        }
        for bad in ["", ".", "..", "a\nb", "a\u{0}b", "a\u{7f}", &"t".repeat(257)] {
            check(ToolName::from_str, bad, false);
        }
    }

    #[test]
    fn a_bad_name_is_refused_where_it_is_read() {
        let err = serde_json::from_str::<ProjectName>(r#""a/b""#).expect_err("refused");
        assert!(err.to_string().contains("invalid project name \"a/b\""), "{err}");
        let long = format!("\"{}\"", "x".repeat(1 << 20));
        let err = serde_json::from_str::<ServerName>(&long).expect_err("refused");
        assert!(err.to_string().len() < 300, "a 1 MiB name is not echoed");
    }

    #[test]
    fn keys_read_back_unambiguously() {
        let key = ToolKey {
            project: ProjectName::parse("a").unwrap(),
            server: ServerName::parse("b").unwrap(),
            tool: ToolName::parse("c/d").unwrap(),
        };
        assert_eq!(key.to_string(), "a/b/c/d");
        assert_eq!(ToolKey::parse("a/b/c/d"), Ok(key.clone()));
        assert_eq!(ServerKey::parse("a/b").map(|k| k.tool(key.tool.clone())), Ok(key));
        // The attack of #12: project `a/b` would have been read as project `a`, server `b`.
        assert!(ToolKey::parse("a/b").is_err());
        assert!(ServerKey::parse("a/b/c").is_err(), "a server name never holds a /");
        assert!(ServerKey::parse("nokey").is_err());
    }

    proptest! {
        /// Distinct names always make distinct keys, and a key's string form reads back as the same names.
        #[test]
        fn key_strings_are_injective(
            project in "[A-Za-z0-9._-]{1,8}",
            server in "[A-Za-z0-9._:@-]{1,8}",
            tool in "[ -~]{1,12}",
        ) {
            let parsed = (ProjectName::parse(project), ServerName::parse(server), ToolName::parse(tool));
            if let (Ok(project), Ok(server), Ok(tool)) = parsed {
                let key = ToolKey { project, server, tool };
                prop_assert_eq!(ToolKey::parse(&key.to_string()), Ok(key.clone()));
                let server_key = key.server_key();
                prop_assert_eq!(ServerKey::parse(&server_key.to_string()), Ok(server_key));
            }
        }
    }
}
