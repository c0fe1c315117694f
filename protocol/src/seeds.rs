//! The client's side of seeds: which files a goal file names, and reading those next
//! to it with the user's own rights (the daemon reads no user-named file outside the
//! installed tasks). Shared with the daemon's goal parser, so both read `seed` alike.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::userfile::UserFileError;

/// Largest seed file sent with a goal.
pub const MAX_SEED_BYTES: u64 = 1 << 20;

/// `seed = "a.py"` or `seed = ["a.py", "b.py"]`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(one) => vec![one],
            OneOrMany::Many(many) => many,
        }
    }
}

/// The seeds a goal file names, as written (empty when it names none or does not parse):
/// what `kernelctl` reads and sends, so it needs no TOML code of its own.
pub fn seed_refs(text: &str) -> Vec<String> {
    #[derive(Deserialize)]
    struct Seeds {
        seed: Option<OneOrMany>,
    }
    toml::from_str::<Seeds>(text)
        .ok()
        .and_then(|s| s.seed)
        .map_or_else(Vec::new, OneOrMany::into_vec)
}

/// For the client, with the user's own rights: the seeds the goal file at `goal_file`
/// names that exist next to it (or at their absolute path) and are readable, keyed by
/// the seed as written. Seeds found nowhere are left to the daemon (the task's own
/// seeds); a seed too large or not text is an error naming the file.
pub fn local_seed_files(goal_file: &Path, text: &str) -> Result<BTreeMap<String, String>, String> {
    let goal_dir = goal_file.parent().unwrap_or(Path::new("."));
    let mut files = BTreeMap::new();
    // The seeds' texts together: more than a goal may keep is refused here, before a
    // request larger than the daemon reads is built (it says why, with file and line,
    // about every other limit on seeds).
    let mut total = 0usize;
    for seed in seed_refs(text) {
        if files.contains_key(&seed) {
            continue;
        }
        let path = goal_dir.join(&seed);
        match crate::userfile::read_regular(&path, MAX_SEED_BYTES) {
            Ok(source) => {
                total += source.len();
                if total > crate::limits::GOAL_STORED_BYTES {
                    return Err(format!(
                        "the seeds next to {} total more than {} bytes, the most a goal may \
                         keep with its seeds' text: name fewer or smaller seeds",
                        goal_file.display(),
                        crate::limits::GOAL_STORED_BYTES
                    ));
                }
                files.insert(seed, source);
            }
            Err(e @ (UserFileError::TooLarge(_) | UserFileError::NotUtf8)) => {
                return Err(format!("seed {}", e.describe(&path, MAX_SEED_BYTES)))
            }
            // Missing, unreadable for this user, or not a file: the daemon says where it
            // looked (a seed of the task's own, perhaps).
            Err(UserFileError::Io(_) | UserFileError::NotRegular(_)) => {}
        }
    }
    Ok(files)
}
