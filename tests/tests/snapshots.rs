//! Snapshots of what people read: `status`, `show`, `events`, `context` and `report` as
//! the real `kernelctl` prints them from the real `kerneld` (CPU mode), with what changes
//! from run to run (times, ids, paths, timings) replaced by placeholders.
//!
//! The goal is chosen to be deterministic: its first seed returns NaN (a wrong result),
//! its second is the demo's tiled kernel (correct: the one best). A change of layout or
//! wording shows up as a snapshot diff; `cargo insta review` (or INSTA_UPDATE=always)
//! accepts it.

use std::path::Path;
use std::time::Duration;

use kerneld::wire::GoalState;
use kerneld_e2e::*;
use regex::Regex;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Placeholders for everything that differs between runs and machines.
fn normalise(out: &str, dir: &Path) -> String {
    let mut s = out.replace(&dir.display().to_string(), "<DIR>");
    s = s.replace(&repo_root().display().to_string(), "<REPO>");
    let rules: &[(&str, &str)] = &[
        // Where each evaluation's time went (issue #12): every figure is a timing.
        (r"(?m)^  phases .*$", "  phases  <PHASES>"),
        (r"\b\d+ evaluations/hour", "<N> evaluations/hour"),
        (
            r"(?m)^(ITER +TOTAL +STATIC.*)\n(^ +\d+ .*\n?)+",
            "$1\n<PHASE ROWS>\n",
        ),
        (r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", "<TIME>"),
        (r"\b\d{2}:\d{2}:\d{2}\b", "<CLOCK>"),
        (r"\b[0-9a-f]{12}\b", "<CAND>"),
        (r"uid \d+", "uid <UID>"),
        (r"pid \d+", "pid <PID>"),
        (r"\d+(\.\d+)?(e-?\d+)?×", "<X>×"),
        (r"±\d+(\.\d+)?%", "±<P>%"),
        (r"spread \d+(\.\d+)?%", "spread <P>%"),
        (r"\d+(\.\d+)? µs", "<T> µs"),
        (r"\b\d+(d\d+h|h\d+m|m\d+s|s)\b", "<DUR>"),
        // Bars and sparklines: their heights are timings.
        (r"[▁▂▃▄▅▆▇█▏▎▍▌▋▊▉]+", "▄▄▄"),
    ];
    for (pattern, with) in rules {
        s = Regex::new(pattern)
            .unwrap()
            .replace_all(&s, *with)
            .into_owned();
    }
    // Column widths follow the widths of the numbers replaced above.
    let spaces = Regex::new(r"(\S) {2,}").unwrap();
    s.lines()
        .map(|l| spaces.replace_all(l.trim_end(), "$1  ").into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn what_people_read_matches_the_snapshots() {
    let dir = TempDir::new("snap");
    let d = Daemon::start(dir.path());
    let goal = fault_goal(dir.path(), "snap", &["nan_output.py", "tiled.py"], 2);
    let run = |args: &[&str]| -> String {
        let out = kernelctl(&d.socket, args);
        assert!(
            out.status.success(),
            "{args:?}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        normalise(&text(&out.stdout), dir.path())
    };
    let id = run(&["enqueue", goal.to_str().unwrap()]);
    let g = d.wait_terminal(id.trim(), Duration::from_secs(240));
    assert_eq!(g.state, GoalState::Completed, "{g:?}\n{}", d.log_text());

    insta::assert_snapshot!("status", run(&["status"]));
    insta::assert_snapshot!("show", run(&["show", "snap"]));
    insta::assert_snapshot!("events", run(&["events", "snap"]));
    insta::assert_snapshot!("context", run(&["context", "snap"]));
    insta::assert_snapshot!("report_terminal", run(&["report", "snap"]));

    // The files: the SVG's words (its geometry follows the timings), the HTML's table of
    // bests, and a PNG of the chart's size.
    let svg_path = dir.path().join("r.svg");
    run(&["report", "snap", "-o", svg_path.to_str().unwrap()]);
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let words: Vec<String> = Regex::new(r">([^<>]+)</text>")
        .unwrap()
        .captures_iter(&svg)
        .map(|c| c[1].to_string())
        .collect();
    // How many y ticks there are follows the timings too: one line per run of them.
    let mut words: Vec<String> = normalise(&words.join("\n"), dir.path())
        .lines()
        .map(String::from)
        .collect();
    words.dedup();
    insta::assert_snapshot!("report_svg_text", words.join("\n"));

    let html_path = dir.path().join("r.html");
    run(&["report", "snap", "-o", html_path.to_str().unwrap()]);
    let html = std::fs::read_to_string(&html_path).unwrap();
    let table = html
        .split("<table>")
        .nth(1)
        .unwrap()
        .split("</table>")
        .next()
        .unwrap();
    insta::assert_snapshot!("report_html_bests", normalise(table, dir.path()));

    let png_path = dir.path().join("r.png");
    run(&["report", "snap", "-o", png_path.to_str().unwrap()]);
    let png = std::fs::read(&png_path).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    // IHDR: width and height, big-endian, at bytes 16..24: twice the SVG's 900×520.
    assert_eq!(&png[16..24], &[0, 0, 0x07, 0x08, 0, 0, 0x04, 0x10]);
}
