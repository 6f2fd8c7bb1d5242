//! How many servers and tools each project holds detector state for in this process. Every key the
//! detector has seen stays in memory (a tool's return-shape window, a server's lists), and a key is made
//! by whoever names it: one API key sending calls with made-up tool names (or a client that puts a
//! request id in the tool name) grew a detector by ≈ 2.5 KB per name, for every project behind it, until
//! it ran out of memory. A project at its limit keeps every key it has; a record that would add one more
//! is refused with the reason (a dead letter). Limits are per detector process, like the list-text budget:
//! in a consumer group each member holds the keys of its own partitions.

use std::collections::HashMap;

use driftline_schemas::{ProjectName, ServerKey, ToolKey};

pub use driftline_schemas::KeyLimits;

/// Keys held per project, against [`KeyLimits`].
#[derive(Debug, Default)]
pub struct KeysHeld {
    servers: HashMap<ProjectName, usize>,
    tools: HashMap<ProjectName, usize>,
}

impl KeysHeld {
    /// Counts what memory holds (after state was restored, reloaded or moved to another member). Keys
    /// restored beyond a limit (one lowered since) are all kept; only new ones are refused.
    pub fn recount<'a>(
        &mut self,
        servers: impl IntoIterator<Item = &'a ServerKey>,
        tools: impl IntoIterator<Item = &'a ToolKey>,
    ) {
        self.servers.clear();
        self.tools.clear();
        for key in servers {
            *self.servers.entry(key.project.clone()).or_default() += 1;
        }
        for key in tools {
            *self.tools.entry(key.project.clone()).or_default() += 1;
        }
    }

    /// Whether `key`'s project has room for one more server (`key` not held yet); the refusal names the
    /// limit. A key is counted once it is added ([`KeysHeld::server_added`]), not when it is checked, so a
    /// record refused later (a list over its limits) takes no room.
    pub fn room_for_server(&self, key: &ServerKey, limits: KeyLimits) -> Result<(), String> {
        room(&self.servers, &key.project, limits.servers).map_err(|held| {
            format!(
                "project {} already has detector state for {held} servers (limits.max_servers_per_project = {}): server {} is not tracked",
                key.project, limits.servers, key.server
            )
        })
    }

    /// Whether `key`'s project has room for one more tool (`key` not held yet), each tool of it holding up
    /// to `per_tool` bytes at its settings; the refusal names the limit that binds.
    pub fn room_for_tool(&self, key: &ToolKey, limits: KeyLimits, per_tool: u64) -> Result<(), String> {
        let by_bytes = tools_within(limits.state_bytes, per_tool);
        room(&self.tools, &key.project, limits.tools.min(by_bytes)).map_err(|held| {
            let tool: String = key.tool.as_str().chars().take(100).collect();
            let limit = match by_bytes < limits.tools {
                true => format!(
                    "limits.max_state_bytes_per_project = {} at up to {per_tool} bytes a tool under the project's history_window and tool_return_value_max_bytes",
                    limits.state_bytes
                ),
                false => format!("limits.max_tools_per_project = {}", limits.tools),
            };
            format!(
                "project {} already has detector state for {held} tools ({limit}): tool {tool} of server {} is not tracked",
                key.project, key.server
            )
        })
    }

    /// Tools `project` holds state for.
    pub fn tools_of(&self, project: &ProjectName) -> usize {
        self.tools.get(project).copied().unwrap_or(0)
    }

    /// A server's state was dropped (freed by an admin).
    pub fn server_removed(&mut self, key: &ServerKey) {
        if let Some(count) = self.servers.get_mut(&key.project) {
            *count = count.saturating_sub(1);
        }
    }

    /// A tool's state was dropped (expired, or freed by an admin).
    pub fn tool_removed(&mut self, key: &ToolKey) {
        if let Some(count) = self.tools.get_mut(&key.project) {
            *count = count.saturating_sub(1);
        }
    }

    pub fn server_added(&mut self, key: &ServerKey) {
        *self.servers.entry(key.project.clone()).or_default() += 1;
    }

    pub fn tool_added(&mut self, key: &ToolKey) {
        *self.tools.entry(key.project.clone()).or_default() += 1;
    }
}

/// How many tools of `per_tool` bytes each fit `budget`.
pub fn tools_within(budget: u64, per_tool: u64) -> usize {
    usize::try_from(budget / per_tool.max(1)).unwrap_or(usize::MAX)
}

/// `Err` with what `project` holds when that is `max` already.
fn room(held: &HashMap<ProjectName, usize>, project: &ProjectName, max: usize) -> Result<(), usize> {
    match held.get(project).copied().unwrap_or(0) {
        count if count >= max => Err(count),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(project: &str, tool: &str) -> ToolKey {
        ToolKey::parse(&format!("{project}/srv/{tool}")).expect("a tool key")
    }

    fn server(project: &str, server: &str) -> ServerKey {
        ServerKey::parse(&format!("{project}/{server}")).expect("a server key")
    }

    #[test]
    fn each_project_adds_keys_up_to_its_own_limit() {
        let limits = KeyLimits { servers: 1, tools: 2, state_bytes: u64::MAX };
        let mut held = KeysHeld::default();
        for name in ["a", "b"] {
            // Checking counts nothing: only an added key takes room.
            assert_eq!(held.room_for_tool(&tool("p", name), limits, 1), Ok(()));
            assert_eq!(held.room_for_tool(&tool("p", name), limits, 1), Ok(()));
            held.tool_added(&tool("p", name));
        }
        let refused = held.room_for_tool(&tool("p", "c"), limits, 1).expect_err("a third tool of p");
        assert!(
            refused.contains("limits.max_tools_per_project = 2") && refused.contains("tool c"),
            "{refused}"
        );
        assert!(refused.contains("state for 2 tools"), "{refused}");
        // Another project has a budget of its own.
        assert_eq!(held.room_for_tool(&tool("q", "c"), limits, 1), Ok(()));
        held.server_added(&server("p", "s1"));
        let refused = held.room_for_server(&server("p", "s2"), limits).expect_err("a second server of p");
        assert!(refused.contains("limits.max_servers_per_project = 1"), "{refused}");
        assert_eq!(held.room_for_server(&server("q", "s2"), limits), Ok(()));
    }

    #[test]
    fn a_recount_starts_from_what_memory_holds() {
        let limits = KeyLimits { servers: 1, tools: 2, state_bytes: u64::MAX };
        let mut held = KeysHeld::default();
        let tools = [tool("p", "a"), tool("p", "b"), tool("p", "c")];
        // Restored beyond the limit (lowered since): kept, and nothing new admitted.
        held.recount([&server("p", "s")], &tools);
        assert!(held.room_for_tool(&tool("p", "d"), limits, 1).is_err());
        assert!(held.room_for_server(&server("p", "t"), limits).is_err());
        held.recount([], &tools[..1]);
        assert_eq!(held.room_for_tool(&tool("p", "d"), limits, 1), Ok(()));
        held.tool_added(&tool("p", "d"));
        assert!(held.room_for_tool(&tool("p", "e"), limits, 1).is_err());
        assert_eq!(held.room_for_server(&server("p", "t"), limits), Ok(()));
    }

    #[test]
    fn a_projects_byte_budget_admits_as_many_tools_as_fit_at_their_worst_case() {
        let limits = KeyLimits { servers: 10, tools: 5, state_bytes: 1000 };
        let mut held = KeysHeld::default();
        for name in ["a", "b", "c"] {
            assert_eq!(held.room_for_tool(&tool("p", name), limits, 300), Ok(()));
            held.tool_added(&tool("p", name));
        }
        let refused =
            held.room_for_tool(&tool("p", "d"), limits, 300).expect_err("1000 B hold three tools of 300");
        assert!(
            refused.contains("limits.max_state_bytes_per_project = 1000 at up to 300 bytes a tool"),
            "{refused}"
        );
        // Smaller tools (a project with a narrower window): the tool count binds again.
        assert_eq!(held.room_for_tool(&tool("p", "d"), limits, 100), Ok(()));
        held.tool_added(&tool("p", "d"));
        held.tool_added(&tool("p", "e"));
        let refused = held.room_for_tool(&tool("p", "f"), limits, 100).expect_err("five tools");
        assert!(refused.contains("limits.max_tools_per_project = 5"), "{refused}");
        // A tool dropped makes room for one more.
        held.tool_removed(&tool("p", "a"));
        assert_eq!(held.tools_of(&"p".parse().expect("a project")), 4);
        assert_eq!(held.room_for_tool(&tool("p", "f"), limits, 100), Ok(()));
    }

    #[test]
    fn a_refusal_quotes_a_bounded_part_of_the_name() {
        let limits = KeyLimits { servers: 1, tools: 0, state_bytes: u64::MAX };
        let long = "x".repeat(256);
        let refused = KeysHeld::default().room_for_tool(&tool("p", &long), limits, 1).expect_err("no room");
        assert!(refused.len() < 300, "{refused}");
    }
}
