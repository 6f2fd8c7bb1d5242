//! What to probe, as configured (`[[probe.servers]]`), and the checked form the prober connects to.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

/// One MCP server to probe: reached at a `url` (Streamable HTTP, or the legacy HTTP+SSE transport), or
/// started as `command` + `args` and spoken to over stdio.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeTarget {
    /// The server name driftline files the results under.
    pub name: driftline_schemas::ServerName,
    /// Streamable HTTP endpoint (`http://127.0.0.1:9000/mcp`), or the SSE endpoint with `transport = "sse"`.
    #[serde(default)]
    pub url: Option<String>,
    /// Extra request headers for `url`, e.g. `{ Authorization = "Bearer …" }`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// `streamable_http` (the default with `url`), `sse`, or `stdio` (the default with `command`).
    #[serde(default)]
    pub transport: Option<TransportKind>,
    /// The program to start (looked up on PATH; no shell is involved).
    #[serde(default)]
    pub command: Option<String>,
    /// Its arguments, one list element each.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables set for the child on top of driftline's own (minus `DRIFTLINE__…`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory of the child; driftline's when unset.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportKind {
    #[serde(alias = "streamable-http", alias = "http")]
    StreamableHttp,
    Sse,
    Stdio,
}

/// A checked target: everything the prober needs to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Http { url: String, headers: Vec<(http::HeaderName, http::HeaderValue)>, sse: bool },
    Stdio(StdioCommand),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioCommand {
    pub program: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
}

impl Endpoint {
    /// How logs and errors name the server's address (a command line is shown without its environment).
    pub fn describe(&self) -> String {
        match self {
            Endpoint::Http { url, sse: false, .. } => url.clone(),
            Endpoint::Http { url, sse: true, .. } => format!("{url} (sse)"),
            Endpoint::Stdio(command) => {
                std::iter::once(&command.program).chain(&command.args).cloned().collect::<Vec<_>>().join(" ")
            }
        }
    }
}

impl ProbeTarget {
    /// A target with nothing set but its name.
    pub fn named(name: driftline_schemas::ServerName) -> Self {
        ProbeTarget {
            name,
            url: None,
            headers: BTreeMap::new(),
            transport: None,
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
        }
    }

    /// Checks the target; the error names the offending key (relative to the `[[probe.servers]]` entry).
    pub fn endpoint(&self) -> Result<Endpoint, String> {
        let transport = self.transport;
        match (&self.url, &self.command) {
            (Some(_), Some(_)) => Err("set either url or command, not both".into()),
            (None, None) => Err("needs url (Streamable HTTP or SSE) or command (stdio)".into()),
            (Some(url), None) => {
                if transport == Some(TransportKind::Stdio) {
                    return Err("transport = \"stdio\" needs command, not url".into());
                }
                if !self.args.is_empty() || !self.env.is_empty() || self.cwd.is_some() {
                    return Err("args, env and cwd belong to a command; this entry has a url".into());
                }
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(format!("url = {url:?} must be an http:// or https:// address"));
                }
                let mut headers = Vec::new();
                for (name, value) in &self.headers {
                    let header = http::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|_| format!("headers: {name:?} is not a valid header name"))?;
                    let value = http::HeaderValue::from_str(value)
                        .map_err(|_| format!("headers.{name}: the value is not a valid header value"))?;
                    headers.push((header, value));
                }
                Ok(Endpoint::Http { url: url.clone(), headers, sse: transport == Some(TransportKind::Sse) })
            }
            (None, Some(program)) => {
                if matches!(transport, Some(TransportKind::StreamableHttp | TransportKind::Sse)) {
                    return Err("transport = \"streamable_http\" / \"sse\" needs url, not command".into());
                }
                if !self.headers.is_empty() {
                    return Err("headers belong to a url; this entry starts a command".into());
                }
                if program.trim().is_empty() {
                    return Err("command must name a program".into());
                }
                let has_nul = |s: &str| s.contains('\0');
                if has_nul(program)
                    || self.args.iter().any(|a| has_nul(a))
                    || self.env.iter().any(|(k, v)| has_nul(k) || has_nul(v))
                {
                    return Err("command, args and env must not contain NUL characters".into());
                }
                if let Some(key) = self.env.keys().find(|k| k.is_empty() || k.contains('=')) {
                    return Err(format!("env: {key:?} is not a variable name"));
                }
                Ok(Endpoint::Stdio(StdioCommand {
                    program: program.clone(),
                    args: self.args.clone(),
                    env: self.env.clone(),
                    cwd: self.cwd.clone(),
                }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(toml_entry: &str, expected: Result<&str, &str>) {
        let target: ProbeTarget = match toml::from_str(toml_entry) {
            Ok(target) => target,
            Err(err) => {
                let message = err.to_string();
                match expected {
                    Err(part) => assert!(message.contains(part), "{message:?} lacks {part:?}"),
                    Ok(_) => panic!("{toml_entry}: {message}"),
                }
                return;
            }
        };
        match (target.endpoint(), expected) {
            (Ok(endpoint), Ok(described)) => assert_eq!(endpoint.describe(), described),
            (Err(message), Err(part)) => assert!(message.contains(part), "{message:?} lacks {part:?}"),
            (got, want) => panic!("{toml_entry}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn targets() {
        check("name = 'a'\nurl = 'http://h/mcp'", Ok("http://h/mcp"));
        check("name = 'a'\nurl = 'http://h/sse'\ntransport = 'sse'", Ok("http://h/sse (sse)"));
        check("name = 'a'\nurl = 'http://h/mcp'\ntransport = 'streamable-http'", Ok("http://h/mcp"));
        check("name = 'a'\ncommand = 'npx'\nargs = ['-y', 'pkg']", Ok("npx -y pkg"));
        check("name = 'a'\ncommand = 'uvx'\ntransport = 'stdio'\nenv = { A = '1' }", Ok("uvx"));
        check("name = 'a'", Err("needs url"));
        check("name = 'a'\nurl = 'http://h'\ncommand = 'x'", Err("not both"));
        check("name = 'a'\nurl = 'ftp://h'", Err("must be an http"));
        check("name = 'a'\nurl = 'http://h'\ntransport = 'stdio'", Err("needs command"));
        check("name = 'a'\ncommand = 'x'\ntransport = 'sse'", Err("needs url"));
        check("name = 'a'\ncommand = 'x'\nheaders = { A = 'b' }", Err("headers belong"));
        check("name = 'a'\nurl = 'http://h'\nargs = ['x']", Err("belong to a command"));
        check("name = 'a'\ncommand = ' '", Err("must name a program"));
        check("name = 'a'\ncommand = 'x'\nenv = { 'A=B' = '1' }", Err("not a variable name"));
        check("name = 'a'\nurl = 'http://h'\nheaders = { 'bad name' = 'v' }", Err("not a valid header name"));
        check("name = 'a'\nurl = 'http://h'\ntransport = 'websocket'", Err("unknown variant"));
        check("name = 'a'\nurl = 'http://h'\nshell = true", Err("unknown field"));
    }
}
