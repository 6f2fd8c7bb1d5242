//! Running code nobody here reviewed: a package's install and its server. Bubblewrap (`bwrap`, Debian's
//! `bubblewrap`) gives the process its own user, PID, IPC, UTS and network namespaces and a mount view of
//! the system's programs read-only, the package read-only, a scratch directory writable and a private
//! `/tmp`; nothing else of the host (no home directories, no driftline data, no credentials) exists in it.
//! util-linux's `prlimit` caps its address space, CPU seconds, file size and open files. The sandbox dies
//! with driftline (`--die-with-parent`), and killing it kills every process inside (the PID namespace).
//! Where either program is missing, or user namespaces are not allowed, nothing is run: `Sandbox::detect`
//! says why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use driftline_probe::StdioCommand;

/// Limits every sandboxed process gets (each is per process; the PID namespace ends them together).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Address space, in bytes (RLIMIT_AS).
    pub memory_bytes: u64,
    /// CPU seconds (RLIMIT_CPU).
    pub cpu_seconds: u64,
    /// Largest file it may write, in bytes (RLIMIT_FSIZE).
    pub file_bytes: u64,
    /// Open files (RLIMIT_NOFILE).
    pub open_files: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { memory_bytes: 4 << 30, cpu_seconds: 300, file_bytes: 1 << 30, open_files: 1024 }
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "no sandbox: {0}; driftline does not run a package's code unsandboxed (install Debian's bubblewrap \
         and util-linux, and allow unprivileged user namespaces)"
    )]
    Unavailable(String),
}

/// One process to run inside.
#[derive(Debug, Clone, Default)]
pub struct Job {
    /// Whether it may reach the network (an install); a server never may.
    pub network: bool,
    /// Writable, its home, temporary files and working directory.
    pub scratch: PathBuf,
    /// Also writable (an install's target, a download cache).
    pub writable: Vec<PathBuf>,
    /// Readable (the installed package).
    pub readable: Vec<PathBuf>,
    /// The whole environment it sees (nothing of driftline's own is passed on).
    pub env: BTreeMap<String, String>,
    pub program: String,
    pub args: Vec<String>,
}

/// A checked sandbox: the programs found, and the host directories every job may read.
#[derive(Debug, Clone)]
pub struct Sandbox {
    bwrap: PathBuf,
    prlimit: PathBuf,
    limits: Limits,
    /// System directories bound read-only (or re-created as the host's symlinks), and the runtimes' prefixes
    /// where they live outside `/usr` (a pyenv or nvm install).
    system: Vec<SystemPath>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum SystemPath {
    ReadOnly(PathBuf),
    Symlink { link: PathBuf, target: PathBuf },
}

/// System directories a program needs: programs and libraries, and `/etc` for the resolver, users and
/// certificates.
const SYSTEM_DIRECTORIES: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc"];

impl Sandbox {
    /// Finds bubblewrap and prlimit on PATH, binds the runtimes' prefixes given (e.g. the real Python's
    /// `sys.base_prefix`), and runs `true` inside once: a host that forbids user namespaces fails here.
    pub async fn detect(limits: Limits, runtime_prefixes: &[PathBuf]) -> Result<Sandbox, SandboxError> {
        let bwrap =
            find_program("bwrap").ok_or_else(|| SandboxError::Unavailable("bwrap is not on PATH".into()))?;
        let prlimit = find_program("prlimit")
            .ok_or_else(|| SandboxError::Unavailable("prlimit is not on PATH".into()))?;
        let mut system = Vec::new();
        for dir in SYSTEM_DIRECTORIES {
            let path = Path::new(dir);
            match std::fs::symlink_metadata(path) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    if let Ok(target) = std::fs::read_link(path) {
                        system.push(SystemPath::Symlink { link: path.to_owned(), target });
                    }
                }
                Ok(meta) if meta.is_dir() => system.push(SystemPath::ReadOnly(path.to_owned())),
                _ => {}
            }
        }
        for prefix in runtime_prefixes {
            let covered = SYSTEM_DIRECTORIES.iter().any(|dir| prefix.starts_with(dir));
            if !covered && prefix.is_absolute() && prefix.is_dir() {
                system.push(SystemPath::ReadOnly(prefix.clone()));
            }
        }
        let sandbox = Sandbox { bwrap, prlimit, limits, system };
        let scratch = std::env::temp_dir().join(format!("driftline-sandbox-check-{}", std::process::id()));
        std::fs::create_dir_all(&scratch).map_err(|err| {
            SandboxError::Unavailable(format!("cannot create {}: {err}", scratch.display()))
        })?;
        let job = Job { scratch: scratch.clone(), program: "true".into(), ..Job::default() };
        let checked = sandbox.run(&job, Duration::from_secs(20), 2048).await;
        let _ = std::fs::remove_dir_all(&scratch);
        match checked {
            Ok(output) if output.success => Ok(sandbox),
            Ok(output) => Err(SandboxError::Unavailable(format!(
                "bubblewrap cannot start a sandbox here: {}",
                output.tail.trim()
            ))),
            Err(err) => Err(SandboxError::Unavailable(format!("bubblewrap cannot start: {err}"))),
        }
    }

    /// The command line that runs `job` inside: prlimit, then bwrap, then the job's program.
    pub fn command(&self, job: &Job) -> StdioCommand {
        let limits = &self.limits;
        let mut args = vec![
            format!("--as={}", limits.memory_bytes),
            format!("--cpu={}", limits.cpu_seconds),
            format!("--fsize={}", limits.file_bytes),
            format!("--nofile={}", limits.open_files),
            "--".to_owned(),
            self.bwrap.display().to_string(),
            "--unshare-all".to_owned(),
        ];
        if job.network {
            args.push("--share-net".into());
        }
        let text = |path: &Path| path.display().to_string();
        args.extend(
            ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--uid", "65534", "--gid", "65534"]
                .map(String::from),
        );
        for path in &self.system {
            match path {
                SystemPath::ReadOnly(dir) => args.extend(["--ro-bind".into(), text(dir), text(dir)]),
                SystemPath::Symlink { link, target } => {
                    args.extend(["--symlink".into(), text(target), text(link)])
                }
            }
        }
        args.extend(["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"].map(String::from));
        for dir in &job.readable {
            args.extend(["--ro-bind".into(), text(dir), text(dir)]);
        }
        for dir in job.writable.iter().chain([&job.scratch]) {
            args.extend(["--bind".into(), text(dir), text(dir)]);
        }
        args.extend(["--chdir".into(), text(&job.scratch), "--clearenv".into()]);
        for (name, value) in &job.env {
            args.extend(["--setenv".into(), name.clone(), value.clone()]);
        }
        args.push("--".into());
        args.push(job.program.clone());
        args.extend(job.args.iter().cloned());
        StdioCommand { program: text(&self.prlimit), args, env: BTreeMap::new(), cwd: None }
    }

    /// Runs `job` to its end within `timeout` (then kills it), keeping the last `tail_bytes` of its output.
    pub async fn run(&self, job: &Job, timeout: Duration, tail_bytes: usize) -> std::io::Result<Finished> {
        let command = self.command(job);
        let mut cmd = tokio::process::Command::new(&command.program);
        cmd.args(&command.args)
            .env_clear()
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        #[cfg(unix)]
        cmd.process_group(0);
        let child = cmd.spawn()?;
        match tokio::time::timeout(timeout, child.wait_with_output()).await {
            Ok(output) => {
                let output = output?;
                let mut tail = output.stderr;
                tail.extend_from_slice(&output.stdout);
                let start = tail.len().saturating_sub(tail_bytes);
                Ok(Finished {
                    success: output.status.success(),
                    tail: String::from_utf8_lossy(&tail[start..]).into_owned(),
                    timed_out: false,
                })
            }
            // Dropping the child kills prlimit/bwrap; the sandbox's PID namespace takes the rest with it.
            Err(_) => Ok(Finished { success: false, tail: String::new(), timed_out: true }),
        }
    }
}

/// How a job run to its end went.
#[derive(Debug, Clone)]
pub struct Finished {
    pub success: bool,
    /// The end of its stderr and stdout, for the error message.
    pub tail: String,
    pub timed_out: bool,
}

/// `name` looked up on PATH, as the shell would.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line() {
        let sandbox = Sandbox {
            bwrap: "/usr/bin/bwrap".into(),
            prlimit: "/usr/bin/prlimit".into(),
            limits: Limits { memory_bytes: 1, cpu_seconds: 2, file_bytes: 3, open_files: 4 },
            system: vec![
                SystemPath::ReadOnly("/usr".into()),
                SystemPath::Symlink { link: "/bin".into(), target: "usr/bin".into() },
            ],
        };
        let job = Job {
            network: false,
            scratch: "/cache/scratch".into(),
            readable: vec!["/cache/pkg".into()],
            env: BTreeMap::from([("HOME".into(), "/cache/scratch".into())]),
            program: "server".into(),
            args: vec!["--stdio".into()],
            ..Job::default()
        };
        let command = sandbox.command(&job);
        assert_eq!(command.program, "/usr/bin/prlimit");
        assert_eq!(
            command.args.join(" "),
            "--as=1 --cpu=2 --fsize=3 --nofile=4 -- /usr/bin/bwrap --unshare-all --die-with-parent \
             --new-session --cap-drop ALL --uid 65534 --gid 65534 --ro-bind /usr /usr --symlink usr/bin /bin \
             --dev /dev --proc /proc --tmpfs /tmp --ro-bind /cache/pkg /cache/pkg \
             --bind /cache/scratch /cache/scratch --chdir /cache/scratch --clearenv \
             --setenv HOME /cache/scratch -- server --stdio"
        );
        assert!(command.env.is_empty());
        let install = sandbox.command(&Job { network: true, ..job });
        assert!(install.args.contains(&"--share-net".to_owned()));
    }
}
