//! What each record does to the detectors' state and the batch: tool lists, probe failures, calls,
//! declarations and operator commands, each after the room its project has.

use std::sync::Arc;

use driftline_bus::{Consumer, Delivered};
use driftline_detectors::contract;
use driftline_detectors::shape_drift;
use driftline_detectors::tool_drift::{
    short_hash, Acceptance, ExpectedRelease, HashedTools, RecordContext, ToolListOutput,
};
use driftline_schemas::api::AcceptResult;
use driftline_schemas::{
    derive_id, DetectorThresholds, Notification, NotificationKind, OperatorCommand, OutputDeclaration,
    OutputKind, ProbeFailure, ProjectName, ServerKey, ToolCallRecord, ToolKey, ToolListRecord, ToolsText,
};
use driftline_store::{
    AppliedCommand, Batch, CallIdentity, EventUpdate, ProjectSettings, RepeatLookup, StoredCall,
    StoredToolList,
};
use serde_json::json;

use crate::declarations::{declaration_messages, DeclaredBefore};
use crate::decode::Input;
use crate::events::{
    BaselineEstablished, CallRepeated, DeclaredOutputMismatched, DriftEventFound, Emit, RecordDeadLettered,
    ShapeDriftSignalled,
};
use crate::keys;
use crate::refusal::{Refusal, RefusalKind};
use crate::state::Outputs;
use crate::tool_lists;
use crate::views::{server_row, ListSummary};
use crate::{repeats, Worker};

pub(crate) fn apply_outputs(outputs: Vec<ToolListOutput>, batch: &mut Batch) {
    for output in outputs {
        match output {
            ToolListOutput::BaselineEstablished { hash, tool_count, security_flags } => {
                let high = security_flags
                    .iter()
                    .filter(|(_, f)| f.severity == driftline_schemas::Severity::High)
                    .count();
                let short_hash = short_hash(&hash);
                BaselineEstablished {
                    short_hash: &short_hash,
                    tool_count,
                    flags: security_flags.len(),
                    high,
                }
                .emit();
            }
            ToolListOutput::DriftEvent(event) => {
                DriftEventFound(&event).emit();
                batch.notifications.push(Notification::drift(&event));
                batch.events.push(event);
            }
            ToolListOutput::EventClosed { event_id, status, by, at } => {
                batch.event_updates.push(EventUpdate { id: event_id, status, by, at });
            }
            ToolListOutput::BaselineAccepted(acceptance) => batch.acceptances.push(acceptance),
        }
    }
}

/// Short hash, tool count and context cost of a server's tool list, for its row.
pub(crate) fn list_summary(list: Option<&HashedTools>) -> ListSummary {
    ListSummary {
        hash: list.map(|l| short_hash(&l.hash)),
        tool_count: list.map_or(0, |l| l.tool_count() as u32),
        context: list.and_then(|l| l.context),
    }
}

impl<C: Consumer> Worker<C> {
    /// Runs the detectors over one record, read; Err(refusal) when it cannot be used (a dead letter).
    pub(crate) fn process(
        &mut self,
        record: &Delivered,
        input: Input<'_>,
        out: &mut Outputs,
    ) -> Result<(), Refusal> {
        let quarantined = self.quarantined.get(&record.key);
        let outcome = if let Some(reason) = quarantined {
            Err(Refusal::new(
                RefusalKind::Quarantined,
                format!(
                    "key {} is quarantined: {reason}; repair or delete that row, or forget the key",
                    record.key
                ),
            ))
        } else {
            match input {
                Input::ToolList(list) => self
                    .room_for_server(&list.key())
                    .and_then(|()| {
                        let surfaces = list.surfaces.as_ref();
                        let limits = self.settings.tool_lists;
                        surfaces.map_or(Ok(()), |s| {
                            limits
                                .check_surfaces(s)
                                .map_err(|err| Refusal::new(RefusalKind::ListLimit, err.to_string()))
                        })
                    })
                    .and_then(|()| {
                        let (servers, key) = (self.servers.iter(), list.key());
                        self.list_texts
                            .read(&list, self.settings.tool_lists, || tool_lists::held_beside(servers, &key))
                    })
                    .map(|tools| self.tool_list(&list, tools, record, out)),
                Input::ProbeFailure(failure) => {
                    self.room_for_server(&failure.key()).map(|()| self.probe_failure(&failure, record, out))
                }
                Input::Command(command) => {
                    self.command(*command, record, out);
                    Ok(())
                }
                Input::Call { identity, call, repeat: false } => {
                    let key = call.key();
                    // Checked before the call's identity is kept: a refused call is no call stored.
                    self.room_for_tool(&key).map(|()| {
                        if self.store.repeat_lookup() == RepeatLookup::Remember {
                            let at = record.appended_at.as_millis();
                            self.recent.remember(repeats::identity_key(&identity), record.position, at);
                        }
                        out.batch.call_identities.push(CallIdentity {
                            identity,
                            position: record.position,
                            received_at: record.appended_at,
                        });
                        self.call(*call, key, record, out);
                    })
                }
                Input::Call { repeat: true, .. } => {
                    CallRepeated(record).emit();
                    Ok(())
                }
                Input::Declaration(declaration) => self
                    .room_for_tool(&declaration.key())
                    .map(|()| self.declaration(&declaration, record, out)),
                Input::Unusable(refusal) => Err(refusal),
            }
        };
        if let Err(refusal) = &outcome {
            self.dead_letters += 1;
            self.dead_letter_counts.add(record, refusal);
            RecordDeadLettered { record, refusal, lines: &mut self.dead_letter_lines }.emit();
        }
        outcome
    }

    /// Whether a record of `key` may be used: a server held already, or one its project has room for.
    pub(crate) fn room_for_server(&self, key: &ServerKey) -> Result<(), Refusal> {
        match self.servers.contains_key(key) {
            true => Ok(()),
            false => self
                .keys_held
                .room_for_server(key, self.settings.keys)
                .map_err(|reason| Refusal::new(RefusalKind::ServerLimit, reason)),
        }
    }

    /// Whether a record of `key` may be used: a tool held already, or one its project has room for.
    pub(crate) fn room_for_tool(&self, key: &ToolKey) -> Result<(), Refusal> {
        match self.tools.contains_key(key) {
            true => Ok(()),
            false => {
                let per_tool =
                    driftline_detectors::tool_state_worst_case_bytes(&self.thresholds_of(&key.project));
                self.keys_held
                    .room_for_tool(key, self.settings.keys, per_tool)
                    .map_err(|reason| Refusal::new(RefusalKind::ToolLimit, reason))
            }
        }
    }

    /// A snapshot, its tools read (shared by the state, an event and the stored snapshot).
    pub(crate) fn tool_list(
        &mut self,
        snapshot: &ToolListRecord<'_>,
        tools: Arc<ToolsText>,
        record: &Delivered,
        out: &mut Outputs,
    ) {
        let key = snapshot.key();
        let policy = Acceptance::from(&self.thresholds_of(&snapshot.project));
        let state = self.servers.state_of(&key, || self.keys_held.server_added(&key));
        if let Some(release) = &snapshot.release {
            // A release nobody runs yet: reported as upcoming; the server's lists and status stay.
            let context = RecordContext {
                project: &snapshot.project,
                server: &snapshot.server,
                position: record.position,
                at: record.appended_at,
            };
            if let Some(upcoming) =
                state.observe_release(tools, snapshot.surfaces.as_ref(), release, context, policy)
            {
                if !upcoming.changes.is_empty() || !upcoming.omitted_changes.is_empty() {
                    out.batch.notifications.push(Notification::upcoming(&upcoming));
                }
                out.batch.upcoming.push(upcoming);
            }
            out.dirty.server(key, record);
            return;
        }
        let was_down = state.down.is_some();
        let context = RecordContext {
            project: &snapshot.project,
            server: &snapshot.server,
            position: record.position,
            at: record.appended_at,
        };
        let before = DeclaredBefore::of(state);
        let observed = state.observe_server(Arc::clone(&tools), snapshot.surfaces.as_ref(), context, policy);
        let changed = before.changes(state);
        out.declarations.extend(declaration_messages(&snapshot.project, &snapshot.server, changed, record));
        apply_outputs(observed.outputs, &mut out.batch);
        let hash = observed.hash;
        out.batch.tool_lists.push(StoredToolList {
            project: snapshot.project.to_string(),
            server: snapshot.server.to_string(),
            captured_at: snapshot.captured_at,
            hash: short_hash(&hash),
            tools,
            surfaces: observed.surfaces,
        });
        let tool_count = observed.tool_count as u32;
        if was_down {
            out.batch.notifications.push(Notification::transition(
                derive_id(OutputKind::Transition, &key.to_string(), record.position),
                &snapshot.project,
                &snapshot.server,
                NotificationKind::Up,
                record.appended_at,
                format!("{tool_count} tools"),
            ));
        }
        let list = ListSummary { hash: Some(short_hash(&hash)), tool_count, context: Some(observed.context) };
        out.batch.servers.push(server_row(
            &snapshot.project,
            &snapshot.server,
            state,
            list,
            snapshot.latency_ms,
            record.appended_at,
        ));
        out.dirty.server(key, record);
    }

    pub(crate) fn probe_failure(&mut self, failure: &ProbeFailure, record: &Delivered, out: &mut Outputs) {
        let key = failure.key();
        let state = self.servers.state_of(&key, || self.keys_held.server_added(&key));
        if state.down.is_none() {
            out.batch.notifications.push(Notification::transition(
                derive_id(OutputKind::Transition, &key.to_string(), record.position),
                &failure.project,
                &failure.server,
                NotificationKind::Down,
                record.appended_at,
                failure.error.clone(),
            ));
        }
        state.probe_failed(&failure.error);
        let list = list_summary(state.observed.as_ref().or(state.baseline.as_ref()));
        out.batch.servers.push(server_row(
            &failure.project,
            &failure.server,
            state,
            list,
            None,
            record.appended_at,
        ));
        out.dirty.server(key, record);
    }

    pub(crate) fn call(
        &mut self,
        mut call: ToolCallRecord,
        key: ToolKey,
        record: &Delivered,
        out: &mut Outputs,
    ) {
        let thresholds = self.thresholds_of(&call.project);
        if !thresholds.argument_shapes {
            call.argument_shape = None;
        }
        let state = self.tools.state_of(&key, || self.keys_held.tool_added(&key));
        state.last_seen = Some(record.appended_at);
        if let Some(firing) = state.shape.observe((&call).into(), &thresholds) {
            let signal = shape_drift::signal(&call, record.position, firing);
            ShapeDriftSignalled { key: &key, signal: &signal }.emit();
            out.batch.signals.push(signal);
        }
        let firing = state.contract.observe((&call).into(), &call.span_id, call.started_at, &thresholds);
        if let (Some(firing), Some(declared)) = (firing, state.contract.declared()) {
            let signal = contract::signal(&call, record.position, firing, declared);
            DeclaredOutputMismatched { key: &key, signal: &signal }.emit();
            out.batch.notifications.push(Notification::output_mismatch(&signal));
            out.batch.signals.push(signal);
        }
        out.batch.calls.push(StoredCall {
            id: derive_id(OutputKind::ToolCall, &key.to_string(), record.position),
            position: record.position,
            call,
        });
        out.dirty.tool(key, record);
    }

    /// A tool's declared output schema changed (published by its server's detector).
    pub(crate) fn declaration(
        &mut self,
        declaration: &OutputDeclaration,
        record: &Delivered,
        out: &mut Outputs,
    ) {
        let key = declaration.key();
        let state = self.tools.state_of(&key, || self.keys_held.tool_added(&key));
        state.last_seen = Some(record.appended_at);
        if state.contract.declare(declaration) {
            tracing::info!(key = %key, declared = ?declaration.schema_hash, sequence = declaration.sequence, "declared output applied");
        } else {
            tracing::debug!(key = %key, sequence = declaration.sequence, "declared output already held");
        }
        out.dirty.tool(key, record);
    }

    pub(crate) fn command(&mut self, command: OperatorCommand, record: &Delivered, out: &mut Outputs) {
        let result = match &command {
            OperatorCommand::AcceptBaseline { project, server, accepted_by, .. } => {
                let key = ServerKey::new(project.clone(), server.clone());
                let context =
                    RecordContext { project, server, position: record.position, at: record.appended_at };
                let (outputs, state) = match self.servers.get_mut(&key) {
                    Some(state) => {
                        let before = DeclaredBefore::of(state);
                        let outputs = state.accept(accepted_by, context);
                        let changed = before.changes(state);
                        out.declarations.extend(declaration_messages(project, server, changed, record));
                        (outputs, Some(state))
                    }
                    None => (Vec::new(), None),
                };
                let acceptance = outputs.iter().find_map(|o| match o {
                    ToolListOutput::BaselineAccepted(a) => Some(a.clone()),
                    _ => None,
                });
                if let Some(state) = state {
                    if acceptance.is_some() {
                        let list = list_summary(state.baseline.as_ref());
                        out.batch.servers.push(server_row(
                            project,
                            server,
                            state,
                            list,
                            None,
                            record.appended_at,
                        ));
                        out.dirty.server(key, record);
                    }
                }
                apply_outputs(outputs, &mut out.batch);
                let result = AcceptResult {
                    server_name: server.to_string(),
                    accepted: acceptance.is_some(),
                    previous_hash: acceptance.as_ref().map(|a| a.previous_hash.clone()),
                    new_hash: acceptance.as_ref().map(|a| a.new_hash.clone()),
                    event_ids: acceptance.map(|a| a.event_ids).unwrap_or_default(),
                    accepted_by: accepted_by.clone(),
                };
                json!(result)
            }
            OperatorCommand::AcceptRelease {
                project, server, version, release_hash, accepted_by, ..
            } => {
                let key = ServerKey::new(project.clone(), server.clone());
                match self.servers.get_mut(&key) {
                    Some(state) => {
                        state.expect_release(ExpectedRelease {
                            version: version.clone(),
                            hash: release_hash.clone(),
                            accepted_by: accepted_by.clone(),
                        });
                        out.dirty.server(key, record);
                        tracing::info!(server = %server, version, release_hash, by = %accepted_by, "upstream release accepted ahead");
                        json!({"server_name": server, "version": version, "release_hash": release_hash, "accepted_ahead": true})
                    }
                    None => {
                        json!({"error": format!("server {server:?} has no baseline to accept a release onto")})
                    }
                }
            }
            OperatorCommand::SetThresholds { project, thresholds, .. } => match thresholds
                .validate()
                .map_err(|err| err.to_string())
                .and_then(|()| self.within_state_budget(project, thresholds))
            {
                Ok(()) => {
                    self.thresholds.insert(project.clone(), *thresholds);
                    out.batch
                        .settings
                        .push(ProjectSettings { project: project.to_string(), thresholds: *thresholds });
                    for (key, state) in self.tools.iter_mut().filter(|(k, _)| k.project == *project) {
                        state.shape.fit_to(thresholds.history_window);
                        state.contract.shrink_to(thresholds.history_window);
                        out.dirty.tools.entry(key.clone()).or_default();
                    }
                    json!({"thresholds": thresholds})
                }
                Err(err) => json!({"error": err}),
            },
            OperatorCommand::ForgetServer { project, server, by, .. } => {
                let key = ServerKey::new(project.clone(), server.clone());
                let held = self.forget_server(&key, &mut out.batch);
                tracing::info!(key = %key, held, %by, "server state forgotten");
                json!({"server": server, "forgotten": held})
            }
            OperatorCommand::ForgetTool { project, server, tool, by, .. } => {
                let key = ToolKey { project: project.clone(), server: server.clone(), tool: tool.clone() };
                let held = self.forget_tool(&key, &mut out.batch);
                tracing::info!(key = %key, held, %by, "tool state forgotten");
                json!({"server": server, "tool": tool, "forgotten": held})
            }
        };
        tracing::info!(command = command.id(), key = %command.key(), "operator command applied");
        out.batch.applied_commands.push(AppliedCommand {
            id: command.id().to_owned(),
            at: record.appended_at,
            result,
        });
    }

    /// Whether the tools `project` holds would stay within `limits.max_state_bytes_per_project` under
    /// `thresholds`, each at its worst case: an admin's settings may not put them beyond it.
    pub(crate) fn within_state_budget(
        &self,
        project: &ProjectName,
        thresholds: &DetectorThresholds,
    ) -> Result<(), String> {
        let per_tool = driftline_detectors::tool_state_worst_case_bytes(thresholds);
        let held = self.keys_held.tools_of(project);
        let budget = self.settings.keys.state_bytes;
        let fit = keys::tools_within(budget, per_tool);
        match held <= fit {
            true => Ok(()),
            false => Err(format!(
                "history_window = {} with tool_return_value_max_bytes = {} lets a tool hold up to {per_tool} bytes of detector state, so limits.max_state_bytes_per_project = {budget} holds {fit} tools; this project holds {held}: free some (driftline forget) or choose smaller settings",
                thresholds.history_window, thresholds.tool_return_value_max_bytes
            )),
        }
    }
}
