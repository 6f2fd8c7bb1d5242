//! An MCP server started as a child process and spoken to over its stdin/stdout (rmcp's child-process
//! transport). The child leads a process group of its own, so a launcher such as `npx` or `uvx` is stopped
//! together with the server it started; its stderr goes to driftline's log, line by line and rate-limited.

use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::transport::TokioChildProcess;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::ChildStderr;

use crate::events::{Emit, StderrSuppressed};
use crate::target::StdioCommand;

/// Longest stderr line logged; the rest of a longer line is logged as further lines.
const MAX_LINE_BYTES: u64 = 2048;
/// At most this many stderr lines per window reach the log; the rest are counted.
const LINES_PER_WINDOW: u32 = 20;
const WINDOW: Duration = Duration::from_secs(10);

/// Starts the child: no shell, the arguments as given, driftline's environment without its own
/// `DRIFTLINE__…` settings (which may hold secrets), plus the configured variables.
pub(crate) fn spawn(
    server: &str,
    command: &StdioCommand,
) -> std::io::Result<(TokioChildProcess, Option<u32>)> {
    let mut cmd = tokio::process::Command::new(&command.program);
    cmd.args(&command.args);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("DRIFTLINE__") {
            cmd.env_remove(name);
        }
    }
    cmd.envs(&command.env);
    if let Some(dir) = &command.cwd {
        cmd.current_dir(dir);
    }
    cmd.kill_on_drop(true);
    let mut wrapped = process_wrap::tokio::CommandWrap::from(cmd);
    #[cfg(unix)]
    wrapped.wrap(process_wrap::tokio::ProcessGroup::leader());
    let (transport, stderr) = TokioChildProcess::builder(wrapped).stderr(Stdio::piped()).spawn()?;
    let pid = transport.id();
    if let Some(stderr) = stderr {
        tokio::spawn(forward_stderr(server.to_owned(), stderr));
    }
    tracing::info!(server, pid, command = %command.program, "mcp server started");
    Ok((transport, pid))
}

/// Kills the child's whole process group at once (a probe that timed out); rmcp's transport then reaps it.
pub(crate) fn kill_group(pid: u32) {
    #[cfg(unix)]
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: killpg only sends a signal; the group is the one this process created for the child.
        unsafe {
            libc::killpg(pid, libc::SIGKILL);
        }
    }
}

async fn forward_stderr(server: String, stderr: ChildStderr) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    let mut window_started = Instant::now();
    let (mut logged, mut suppressed) = (0u32, 0u64);
    loop {
        line.clear();
        match (&mut reader).take(MAX_LINE_BYTES).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if window_started.elapsed() >= WINDOW {
            report_suppressed(&server, suppressed);
            window_started = Instant::now();
            (logged, suppressed) = (0, 0);
        }
        if logged < LINES_PER_WINDOW {
            logged += 1;
            let text = String::from_utf8_lossy(&line);
            tracing::info!(server = %server, line = %text.trim_end(), "mcp server stderr");
        } else {
            suppressed += 1;
        }
    }
    report_suppressed(&server, suppressed);
}

fn report_suppressed(server: &str, lines: u64) {
    if lines > 0 {
        StderrSuppressed { server, lines }.emit();
    }
}
