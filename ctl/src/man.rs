//! `kernelctl man`: the man pages, made by clap_mangen from the same clap definition as
//! `--help` and the shell completions, so the three never disagree. (kerneld's own page
//! comes from `kerneld man`, out of the daemon's definition.)

use std::io::Write;
use std::path::{Path, PathBuf};

/// The page of `cmd` and, with `out`, one page per visible subcommand (`kernelctl-status.1`,
/// ... as git and systemd name theirs). Without `out` the top page goes to `stdout`.
/// Returns the files written.
pub fn write(
    cmd: clap::Command,
    out: Option<&Path>,
    stdout: &mut dyn Write,
) -> Result<Vec<PathBuf>, String> {
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let Some(dir) = out else {
        let mut page = Vec::new();
        man(cmd).render(&mut page).map_err(|e| e.to_string())?;
        stdout
            .write_all(&page)
            .map_err(|e| format!("cannot write the man page to stdout: {e}"))?;
        return Ok(Vec::new());
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut written = Vec::new();
    pages(cmd, dir, &mut written)?;
    Ok(written)
}

fn man(cmd: clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(cmd)
        .source(format!("kerneld {}", env!("CARGO_PKG_VERSION")))
        .manual("kerneld manual")
}

fn pages(cmd: clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> Result<(), String> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        pages(sub.clone(), dir, written)?;
    }
    let page = man(cmd);
    let path = page
        .generate_to(dir)
        .map_err(|e| format!("cannot write a man page in {}: {e}", dir.display()))?;
    written.push(path);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_written_for_the_command_and_each_subcommand() {
        let cmd = clap::Command::new("tool")
            .about("does things")
            .subcommand(clap::Command::new("run").about("runs"))
            .subcommand(clap::Command::new("secret").hide(true));
        let dir = std::env::temp_dir().join(format!("kd-man-{}", std::process::id()));
        let mut files = write(cmd.clone(), Some(&dir), &mut Vec::new()).unwrap();
        files.sort();
        assert_eq!(files, [dir.join("tool-run.1"), dir.join("tool.1")]);
        let page = std::fs::read_to_string(dir.join("tool.1")).unwrap();
        assert!(
            page.starts_with(".ie \\n(.g .ds Aq") || page.contains(".TH tool 1"),
            "{page}"
        );
        let _ = std::fs::remove_dir_all(&dir);
        let mut stdout = Vec::new();
        assert!(write(cmd, None, &mut stdout).unwrap().is_empty());
        assert!(String::from_utf8(stdout).unwrap().contains("does things"));
    }
}
