//! The server's detector publishes each tool's declared output schema when the baseline changes: once
//! per change, nothing for a list it already holds, and once for state stored by a driftline that did
//! not publish them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use driftline_bus::{BusError, Message, Producer, SqliteBus, Topic};
use driftline_store::{Batch, DetectorStore, SqliteStore, Streams};
use driftline_worker::{Worker, WorkerSettings};
use serde_json::{json, Value};

/// What the worker published as declarations.
#[derive(Default)]
struct Recorder(Mutex<Vec<Message>>);

#[async_trait]
impl Producer for Recorder {
    async fn publish(&self, messages: Vec<Message>) -> Result<(), BusError> {
        self.0.lock().expect("recorder").extend(messages);
        Ok(())
    }
}

impl Recorder {
    /// (key, schema hash or null, sequence) of each declaration since the last call.
    fn take(&self) -> Vec<(String, Value, u64)> {
        let messages = std::mem::take(&mut *self.0.lock().expect("recorder"));
        messages
            .into_iter()
            .map(|m| {
                assert_eq!(m.topic, Topic::Spans, "declarations travel with the tool's calls");
                let body: Value = serde_json::from_slice(&m.payload).expect("JSON");
                assert_eq!(body["type"], "output_declaration");
                assert_eq!(
                    format!(
                        "{}/{}/{}",
                        body["project"].as_str().unwrap_or(""),
                        body["server"].as_str().unwrap_or(""),
                        body["tool"].as_str().unwrap_or("")
                    ),
                    m.key
                );
                (m.key, body["schema_hash"].clone(), body["sequence"].as_u64().unwrap_or(u64::MAX))
            })
            .collect()
    }
}

fn dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("driftline-declarations-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

fn list(tools: Value) -> Message {
    let snapshot = json!({"project": "p", "server": "srv", "captured_at": "2026-01-01T00:00:00Z",
        "source": "api", "tools": tools});
    Message { topic: Topic::ToolLists, key: "p/srv".into(), payload: snapshot.to_string().into_bytes() }
}

fn tool(name: &str, output: Option<Value>) -> Value {
    let mut tool = json!({"name": name, "inputSchema": {"type": "object"}});
    if let Some(output) = output {
        tool["outputSchema"] = output;
    }
    tool
}

fn v1() -> Value {
    json!([
        tool("a", Some(json!({"type": "object", "properties": {"x": {"type": "number"}}}))),
        tool("b", Some(json!({"type": "object"}))),
        tool("c", None),
    ])
}

async fn drain<C: driftline_bus::Consumer>(worker: &mut Worker<C>) {
    for _ in 0..20 {
        if worker.poll_once(50, Duration::ZERO).await.expect("a batch").records == 0 {
            return;
        }
    }
}

/// A worker over `bus` and `store` that publishes its declarations to `recorder`.
async fn start_worker(
    bus: &SqliteBus,
    store: &Arc<SqliteStore>,
    recorder: &Arc<Recorder>,
) -> Worker<impl driftline_bus::Consumer> {
    Worker::resume(bus.consumer(), store.clone(), WorkerSettings::default())
        .await
        .expect("worker")
        .with_declarations(recorder.clone())
}

#[tokio::test]
async fn one_declaration_per_changed_tool_and_none_for_a_list_already_held() {
    let dir = dir("changes");
    let bus = SqliteBus::open(&dir.join("bus.db"), || 0).expect("bus");
    let store = Arc::new(SqliteStore::open(&dir.join("store.db")).expect("store"));
    let recorder = Arc::new(Recorder::default());
    let mut worker = start_worker(&bus, &store, &recorder).await;

    bus.publish(vec![list(v1())]).await.expect("publish");
    drain(&mut worker).await;
    let first = recorder.take();
    let keys: Vec<&str> = first.iter().map(|(k, _, _)| k.as_str()).collect();
    assert_eq!(keys, ["p/srv/a", "p/srv/b"], "the first baseline declares every tool with an output schema");
    assert!(first.iter().all(|(_, hash, _)| hash.as_str().is_some_and(|h| h.len() == 8)), "{first:?}");

    bus.publish(vec![list(v1())]).await.expect("publish");
    drain(&mut worker).await;
    assert!(recorder.take().is_empty(), "the same list again declares nothing");

    // A compatible change (an output property added), accepted at once by the default policy: `a` only.
    let mut v2 = v1();
    v2[0]["outputSchema"]["properties"]["y"] = json!({"type": "string"});
    bus.publish(vec![list(v2.clone())]).await.expect("publish");
    drain(&mut worker).await;
    let second = recorder.take();
    let keys: Vec<&str> = second.iter().map(|(k, _, _)| k.as_str()).collect();
    assert_eq!(keys, ["p/srv/a"], "{second:?}");
    assert!(second[0].2 > first[0].2, "a later baseline has a later sequence");
    assert_ne!(second[0].1, first[0].1);

    // A breaking change and a removed output schema wait for an operator: nothing is declared until the
    // list is accepted, then `a` is declared again and `b` withdrawn (no schema).
    let mut v3 = v2;
    v3[0]["outputSchema"]["properties"]["x"] = json!({"type": "string"});
    v3[1] = tool("b", None);
    bus.publish(vec![list(v3)]).await.expect("publish");
    drain(&mut worker).await;
    assert!(recorder.take().is_empty(), "an unaccepted list changes no declaration");
    let accept = json!({"command": "accept_baseline", "id": "accept-1", "project": "p", "server": "srv",
        "accepted_by": "operator"});
    let command =
        Message { topic: Topic::ToolLists, key: "p/srv".into(), payload: accept.to_string().into_bytes() };
    bus.publish(vec![command]).await.expect("publish");
    drain(&mut worker).await;
    let accepted: Vec<(String, bool)> =
        recorder.take().into_iter().map(|(k, h, _)| (k, h.is_string())).collect();
    assert_eq!(accepted, [("p/srv/a".to_owned(), true), ("p/srv/b".to_owned(), false)]);
}

#[tokio::test]
async fn state_stored_before_declarations_publishes_them_once() {
    let dir = dir("upgrade");
    let bus = SqliteBus::open(&dir.join("bus.db"), || 0).expect("bus");
    let store = Arc::new(SqliteStore::open(&dir.join("store.db")).expect("store"));
    let recorder = Arc::new(Recorder::default());
    let mut worker = start_worker(&bus, &store, &recorder).await;
    bus.publish(vec![list(v1())]).await.expect("publish");
    drain(&mut worker).await;
    assert_eq!(recorder.take().len(), 2);

    // The server's state as an older driftline stored it: no `declarations_published`.
    let resume = store.resume(Streams::All).await.expect("resume");
    let mut state = resume.states.into_iter().find(|s| s.kind == "server").expect("server state");
    let mut json: Value = serde_json::from_str(&state.state).expect("state JSON");
    json.as_object_mut().expect("object").remove("declarations_published");
    state.state = json.to_string();
    store.apply(Batch { states: vec![state], ..Batch::default() }).await.expect("store the old state");

    let mut worker = start_worker(&bus, &store, &recorder).await;
    bus.publish(vec![list(v1())]).await.expect("publish");
    drain(&mut worker).await;
    let keys: Vec<String> = recorder.take().into_iter().map(|(k, _, _)| k).collect();
    assert_eq!(keys, ["p/srv/a", "p/srv/b"], "published once at the next record");
    bus.publish(vec![list(v1())]).await.expect("publish");
    drain(&mut worker).await;
    assert!(recorder.take().is_empty(), "and not again");
}
