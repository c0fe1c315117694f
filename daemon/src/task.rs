//! What the daemon knows of a task: the names in its `task.toml` (shapes, baselines,
//! seeds). The daemon never imports the task's Python; the harness worker does.
//! Format: docs/HARNESS.md section 1.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The parts of `task.toml` a goal is validated against. Other keys belong to the
/// harness and are ignored here.
#[derive(Debug, Clone, Deserialize)]
pub struct TaskManifest {
    pub name: String,
    #[serde(default)]
    pub description: String,
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
    #[serde(default)]
    pub heldout: BTreeMap<String, toml::Table>,
    #[serde(default)]
    pub smoke: BTreeMap<String, toml::Table>,
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

    /// Finds a task by what a goal file says: an absolute path, a path relative to
    /// the goal file's directory, or the name of a directory under the daemon's
    /// kernels directory. Returns every place it looked when none has a `task.toml`.
    pub fn resolve(name: &str, goal_dir: &Path, kernels_dir: &Path) -> Result<Task, String> {
        let raw = Path::new(name);
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
