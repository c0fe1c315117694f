//! What the daemon knows of a task: the names in its `task.toml` (shapes, baselines,
//! seeds). The daemon never imports the task's Python; the harness worker does.
//! Format: docs/HARNESS.md section 1.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

/// The parts of `task.toml` a goal is validated against. Other keys belong to the
/// harness and are ignored here.
#[derive(Debug, Clone, Deserialize)]
pub struct TaskManifest {
    pub name: String,
    pub entry: String,
    #[serde(default)]
    pub default_shapes: Vec<String>,
    #[serde(default = "default_baseline")]
    pub default_baseline: String,
    #[serde(default)]
    pub seeds: Vec<String>,
    #[serde(default)]
    pub baselines: BTreeMap<String, String>,
    #[serde(default)]
    pub shapes: BTreeMap<String, toml::Table>,
}

fn default_baseline() -> String {
    "reference".into()
}

/// A task directory and its manifest.
#[derive(Debug, Clone)]
pub struct Task {
    pub dir: PathBuf,
    pub manifest: TaskManifest,
}

impl Task {
    /// Reads `DIR/task.toml`. The error says which file and what is wrong with it.
    pub fn load(dir: &Path) -> Result<Task, String> {
        let file = dir.join("task.toml");
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let manifest: TaskManifest =
            toml::from_str(&text).map_err(|e| format!("{}: {}", file.display(), e.message()))?;
        let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        Ok(Task { dir, manifest })
    }

    /// Finds a task by what a goal file says: the name of a directory under the daemon's
    /// kernels directory, or (only for a `trusted` requester: the task's Python runs as
    /// kerneld's user) an absolute path or a path relative to the goal file's directory.
    /// The error says every place it looked, or why a path was refused and what to do.
    pub fn resolve(
        name: &str,
        goal_dir: &Path,
        kernels_dir: &Path,
        trusted: bool,
    ) -> Result<Task, String> {
        let raw = Path::new(name);
        let plain_name = !name.is_empty()
            && raw
                .components()
                .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !trusted {
            let installed = kernels_dir.join(raw);
            if plain_name && installed.join("task.toml").is_file() {
                return Task::load(&installed);
            }
            // Nothing outside the kernels directory is looked at on behalf of this user.
            return Err(format!(
                "task `{name}` refused: it is not a task installed under the kernels directory \
                 ({}), and a task given by path is accepted only from root, kerneld's own user \
                 or its admin group, because kerneld runs the task's Python as its own user; \
                 name an installed task ({}), install this one under {} (ask an administrator), \
                 or have an administrator enqueue the goal",
                kernels_dir.display(),
                installed_tasks(kernels_dir),
                kernels_dir.display()
            ));
        }
        let candidates: Vec<PathBuf> = if raw.is_absolute() {
            vec![raw.to_path_buf()]
        } else {
            vec![goal_dir.join(raw), kernels_dir.join(raw)]
        };
        for dir in &candidates {
            if dir.join("task.toml").is_file() {
                return Task::load(dir);
            }
        }
        let looked: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
        Err(format!(
            "task `{name}` not found: no task.toml in {}; name a directory under the kernels \
             directory ({}) or a path to a task directory",
            looked.join(" or "),
            kernels_dir.display()
        ))
    }

    pub fn shape_names(&self) -> impl Iterator<Item = &String> {
        self.manifest.shapes.keys()
    }
}

/// The names of the tasks installed under `kernels_dir` (directories with a task.toml),
/// for messages.
pub fn installed_tasks(kernels_dir: &Path) -> String {
    let mut names: Vec<String> = std::fs::read_dir(kernels_dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("task.toml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    if names.is_empty() {
        "none is installed".into()
    } else {
        names.join(", ")
    }
}
