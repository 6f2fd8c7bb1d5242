//! Why a record could not be used: the dead letter's reason, and the kind it is counted under (the
//! `reason` label of `driftline_worker_dead_letters_total`, and the per-project counts the dashboard and
//! `driftline health` show, so a client whose calls are dropped for a limit can see it).

use std::fmt;

/// What kind of refusal; its name is the metric label and the stored count's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RefusalKind {
    /// The project holds `limits.max_tools_per_project` tools, or as many as its byte budget holds.
    ToolLimit,
    /// The project holds `limits.max_servers_per_project` servers.
    ServerLimit,
    /// A tool list (or what came with it) beyond its limits.
    ListLimit,
    /// The key's stored state cannot be read.
    Quarantined,
    /// Not a record the detector reads (malformed, a wrong key).
    Unusable,
}

impl RefusalKind {
    pub const ALL: [RefusalKind; 5] = [
        RefusalKind::ToolLimit,
        RefusalKind::ServerLimit,
        RefusalKind::ListLimit,
        RefusalKind::Quarantined,
        RefusalKind::Unusable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RefusalKind::ToolLimit => "tool_limit",
            RefusalKind::ServerLimit => "server_limit",
            RefusalKind::ListLimit => "list_limit",
            RefusalKind::Quarantined => "quarantined",
            RefusalKind::Unusable => "unusable",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == name)
    }
}

/// A record refused, with the reason a person reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub kind: RefusalKind,
    pub reason: String,
}

impl Refusal {
    pub fn new(kind: RefusalKind, reason: impl Into<String>) -> Self {
        Refusal { kind, reason: reason.into() }
    }
}

/// A record the detector cannot read: most refusals are this.
impl From<String> for Refusal {
    fn from(reason: String) -> Self {
        Refusal::new(RefusalKind::Unusable, reason)
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}
