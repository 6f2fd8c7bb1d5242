//! Installing one version of a package into the cache with the ecosystem's own client, inside the sandbox
//! (network allowed, writing only the install directory and the client's download cache), and finding the
//! program that starts its server.
//!
//! npm: `npm install --ignore-scripts` into `CACHE/installs/npm-NAME/VERSION` (install scripts are code a
//! server's author controls: they do not run). PyPI: a virtualenv made by the host's Python, then
//! `pip install` into it (a source distribution's build runs, sandboxed). A finished install is marked and
//! reused; an unfinished one is thrown away and started again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::package::{Ecosystem, Package, Version};
use crate::sandbox::{Job, Sandbox};
use crate::UpstreamError;

/// Written last into an install directory: the install finished.
const DONE_MARKER: &str = ".driftline-installed";
/// Variables an install may need to reach a registry: the site's proxy and the certificate authorities it
/// trusts (a TLS-inspecting proxy's). Nothing else of driftline's environment is passed on.
const NETWORK_VARIABLES: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "NODE_EXTRA_CA_CERTS",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "PIP_CERT",
    "REQUESTS_CA_BUNDLE",
];

/// Where and how packages are installed.
#[derive(Debug, Clone)]
pub struct Installer {
    pub cache_dir: PathBuf,
    /// npm's registry, e.g. `https://registry.npmjs.org/`.
    pub npm_registry: String,
    /// A PyPI simple index, e.g. `https://pypi.org/simple/`.
    pub pypi_index: String,
    /// The host's Python (its real executable, not a shim), which makes each virtualenv.
    pub python: PathBuf,
    /// Directories holding `node`/`npm` and the like, for PATH inside.
    pub runtime_bins: Vec<PathBuf>,
    pub timeout: Duration,
}

/// One installed version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub package: Package,
    pub version: Version,
    pub dir: PathBuf,
    /// Where the package's programs are: `node_modules/.bin` or the virtualenv's `bin`.
    pub bin_dir: PathBuf,
}

impl Installer {
    fn install_dir(&self, package: &Package, version: &Version) -> PathBuf {
        self.cache_dir.join("installs").join(package.directory_name()).join(version.as_str())
    }

    fn path_variable(&self, first: Option<&Path>) -> String {
        let mut dirs: Vec<PathBuf> = first.map(Path::to_owned).into_iter().collect();
        dirs.extend(self.runtime_bins.iter().cloned());
        dirs.extend(["/usr/local/bin", "/usr/bin", "/bin"].map(PathBuf::from));
        dirs.iter().map(|dir| dir.display().to_string()).collect::<Vec<_>>().join(":")
    }

    /// The environment of every sandboxed process: nothing of driftline's but a proxy for installs.
    pub(crate) fn base_env(
        &self,
        scratch: &Path,
        bin: Option<&Path>,
        install: bool,
    ) -> BTreeMap<String, String> {
        let mut env = BTreeMap::from([
            ("PATH".to_owned(), self.path_variable(bin)),
            ("HOME".to_owned(), scratch.display().to_string()),
            ("TMPDIR".to_owned(), "/tmp".to_owned()),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ]);
        if install {
            for name in NETWORK_VARIABLES {
                if let Ok(value) = std::env::var(name) {
                    env.insert((*name).to_owned(), value);
                }
            }
        }
        env
    }

    /// Installs `package` at `version`, or finds it installed.
    pub async fn install(
        &self,
        sandbox: &Sandbox,
        package: &Package,
        version: &Version,
    ) -> Result<Installed, UpstreamError> {
        let dir = self.install_dir(package, version);
        let bin_dir = match package.ecosystem {
            Ecosystem::Npm => dir.join("node_modules").join(".bin"),
            Ecosystem::Pypi => dir.join("venv").join("bin"),
        };
        let installed =
            Installed { package: package.clone(), version: version.clone(), dir: dir.clone(), bin_dir };
        if dir.join(DONE_MARKER).is_file() {
            return Ok(installed);
        }
        let io = |what: &str, path: &Path, err: std::io::Error| {
            UpstreamError::Install(format!("cannot {what} {}: {err}", path.display()))
        };
        // One install of a version at a time, across processes (two CLI checks, a check beside the
        // watcher): the second waits, then finds it installed.
        let lock_path = dir.with_file_name(format!("{version}.lock"));
        if let Some(parent) = lock_path.parent() {
            std::fs::create_dir_all(parent).map_err(|err| io("create", parent, err))?;
        }
        let locking = lock_path.clone();
        let _install_lock = tokio::task::spawn_blocking(move || {
            use std::os::fd::AsRawFd;
            let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&locking)?;
            // File::lock is newer than the workspace's MSRV (1.86); flock(2) is what it calls.
            // SAFETY: flock only reads the descriptor, which `file` keeps open across the call.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok::<_, std::io::Error>(file)
        })
        .await
        .map_err(|err| UpstreamError::Install(format!("cannot wait for the install lock: {err}")))?
        .map_err(|err| io("lock", &lock_path, err))?;
        if dir.join(DONE_MARKER).is_file() {
            return Ok(installed);
        }
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|err| io("clear", &dir, err))?;
        }
        std::fs::create_dir_all(&dir).map_err(|err| io("create", &dir, err))?;
        let scratch = self.cache_dir.join("scratch").join(format!("install-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch).map_err(|err| io("create", &scratch, err))?;
        let downloads = self.cache_dir.join("downloads").join(package.ecosystem.as_str());
        std::fs::create_dir_all(&downloads).map_err(|err| io("create", &downloads, err))?;
        let steps: Vec<(String, Vec<String>)> = match package.ecosystem {
            Ecosystem::Npm => vec![(
                "npm".into(),
                vec![
                    "install".into(),
                    "--prefix".into(),
                    dir.display().to_string(),
                    "--ignore-scripts".into(),
                    "--no-audit".into(),
                    "--no-fund".into(),
                    "--no-package-lock".into(),
                    "--loglevel=error".into(),
                    "--registry".into(),
                    self.npm_registry.clone(),
                    "--cache".into(),
                    downloads.display().to_string(),
                    package.pinned(version),
                ],
            )],
            Ecosystem::Pypi => {
                let venv = dir.join("venv");
                vec![
                    (
                        self.python.display().to_string(),
                        vec!["-m".into(), "venv".into(), venv.display().to_string()],
                    ),
                    (
                        venv.join("bin").join("python").display().to_string(),
                        vec![
                            "-m".into(),
                            "pip".into(),
                            "install".into(),
                            "--no-input".into(),
                            "--disable-pip-version-check".into(),
                            "--quiet".into(),
                            "--index-url".into(),
                            self.pypi_index.clone(),
                            "--cache-dir".into(),
                            downloads.display().to_string(),
                            package.pinned(version),
                        ],
                    ),
                ]
            }
        };
        let mut env = self.base_env(&scratch, None, true);
        // The host's pip and npm configuration stays outside: the index is the one configured here.
        env.insert("PIP_CONFIG_FILE".into(), "/dev/null".into());
        env.insert("NPM_CONFIG_USERCONFIG".into(), "/dev/null".into());
        let started = std::time::Instant::now();
        for (program, args) in steps {
            let job = Job {
                network: true,
                scratch: scratch.clone(),
                writable: vec![dir.clone(), downloads.clone()],
                readable: certificate_files(&env),
                env: env.clone(),
                program,
                args,
            };
            let left = self.timeout.saturating_sub(started.elapsed());
            let finished = sandbox
                .run(&job, left, 4096)
                .await
                .map_err(|err| UpstreamError::Install(format!("cannot start the sandbox: {err}")))?;
            if finished.timed_out {
                return Err(UpstreamError::Install(format!(
                    "installing {} timed out after {:?}",
                    package.pinned(version),
                    self.timeout
                )));
            }
            if !finished.success {
                return Err(UpstreamError::Install(format!(
                    "installing {} failed: {}",
                    package.pinned(version),
                    last_lines(&finished.tail, 6)
                )));
            }
        }
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::write(dir.join(DONE_MARKER), package.pinned(version))
            .map_err(|err| io("mark", &dir, err))?;
        Ok(installed)
    }
}

/// Certificate files the environment names outside the system directories the sandbox already shows.
fn certificate_files(env: &BTreeMap<String, String>) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        ["NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "SSL_CERT_DIR", "PIP_CERT", "REQUESTS_CA_BUNDLE"]
            .iter()
            .filter_map(|name| env.get(*name))
            .map(PathBuf::from)
            .filter(|path| {
                path.is_absolute() && !path.starts_with("/etc") && !path.starts_with("/usr") && path.exists()
            })
            .collect();
    files.sort();
    files.dedup();
    files
}

fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|line| !line.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(count)..].join(" | ")
}

impl Installed {
    /// The program that starts the server when none is configured: npm's `bin` entry (the one, or the one
    /// named as the package), PyPI's console script named as the project (or its only one).
    pub fn default_program(&self) -> Result<PathBuf, UpstreamError> {
        let unscoped = self.package.name.rsplit('/').next().unwrap_or(&self.package.name).to_owned();
        let mut programs: Vec<String> = match self.package.ecosystem {
            // The package's own `bin` entries (node_modules/.bin also holds its dependencies').
            Ecosystem::Npm => {
                let manifest = self.dir.join("node_modules").join(&self.package.name).join("package.json");
                let text = std::fs::read(&manifest).unwrap_or_default();
                match serde_json::from_slice::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v.get("bin").cloned())
                {
                    Some(serde_json::Value::String(_)) => vec![unscoped.clone()],
                    Some(serde_json::Value::Object(bins)) => bins.keys().cloned().collect(),
                    _ => Vec::new(),
                }
            }
            Ecosystem::Pypi => match std::fs::read_dir(&self.bin_dir) {
                Ok(entries) => entries
                    .filter_map(|entry| entry.ok())
                    .map(|entry| entry.file_name().to_string_lossy().into_owned())
                    // The virtualenv's own programs are not the package's.
                    .filter(|name| {
                        !["python", "pip", "activate", "Activate"].iter().any(|own| name.starts_with(own))
                    })
                    .collect(),
                Err(_) => Vec::new(),
            },
        };
        // A program name is one path component (a manifest is the package author's text).
        programs.retain(|name| !name.is_empty() && !name.contains('/') && name != "." && name != "..");
        programs.sort();
        let normalise = |name: &str| name.to_ascii_lowercase().replace(['_', '.'], "-");
        let chosen = match programs.as_slice() {
            [only] => Some(only.clone()),
            many => many.iter().find(|name| normalise(name) == normalise(&unscoped)).cloned(),
        };
        match chosen {
            Some(name) => Ok(self.bin_dir.join(name)),
            None if programs.is_empty() => Err(UpstreamError::Install(format!(
                "{} installs no program; set the command that starts its server",
                self.package.pinned(&self.version)
            ))),
            None => Err(UpstreamError::Install(format!(
                "{} installs several programs ({}); set the command that starts its server",
                self.package.pinned(&self.version),
                programs.join(", ")
            ))),
        }
    }

    /// A configured program: a bare name is looked up among the package's programs first.
    pub fn program(&self, configured: &str) -> PathBuf {
        let own = self.bin_dir.join(configured);
        if !configured.contains('/') && own.exists() {
            own
        } else {
            PathBuf::from(configured)
        }
    }
}
