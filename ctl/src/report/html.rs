//! HTML: one self-contained page (no scripts, no external files) with the chart and the
//! table of bests, for a browser, a wiki or a mail.

use std::fmt::Write as _;

use super::svg::{esc, svg};
use super::Progress;
use crate::render;

pub fn page(p: &Progress) -> String {
    let name = esc(&p.name);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{name}: kerneld report</title>
<style>
body {{ font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; color: #333; margin: 2em auto; max-width: 940px; }}
h1 {{ font-size: 1.4em; margin-bottom: 0.2em; }}
p.headline {{ color: #666; margin-top: 0; }}
table {{ border-collapse: collapse; margin-top: 1em; }}
th, td {{ padding: 0.25em 0.8em; border-bottom: 1px solid #e6e6e6; }}
th {{ text-align: left; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
pre.diff {{ background: #f7f7f7; padding: 0.6em; overflow-x: auto; font-size: 0.85em; }}
pre.diff .add {{ color: #1a7f37; }} pre.diff .del {{ color: #cf222e; }} pre.diff .hunk {{ color: #8250df; }}
code {{ font-size: 0.95em; }}
table.lineage td:last-child {{ overflow-wrap: anywhere; }}
</style>
</head>
<body>
<h1>{name}</h1>
<p class="headline">{}</p>
"#,
        esc(&p.headline_and_rate())
    );
    if p.interpreted {
        s.push_str("<p><strong>Interpreted (CPU mode):</strong> these timings come from Triton's interpreter, not from a GPU.</p>\n");
    }
    s.push_str(&svg(p));
    s.push_str(&bests_table(p));
    s.push_str(&lineage(p));
    let failures = p.failure_breakdown();
    if !failures.is_empty() {
        let _ = writeln!(s, "<p>Failed evaluations: {}.</p>", esc(&failures));
    }
    let _ = writeln!(
        s,
        "<p>The best's source: <code>kernelctl best {} -o best.py</code></p>\n</body>\n</html>",
        esc(&p.goal)
    );
    s
}

/// Every new best beyond noise: when, which candidate, how fast, and the gain on the last.
fn bests_table(p: &Progress) -> String {
    let mut s = String::from("<h2>New bests (beyond noise)</h2>\n");
    if p.best.is_empty() {
        s.push_str("<p>No correct candidate yet.</p>\n");
        return s;
    }
    let timing = p
        .timing
        .as_deref()
        .map_or(String::new(), |t| format!(" ({})", esc(t)));
    let _ = writeln!(
        s,
        "<table>\n<tr><th>iteration</th><th>after</th><th>candidate</th><th>speedup{timing}</th><th>noise</th><th>gain</th></tr>"
    );
    let mut previous: Option<f64> = None;
    for step in &p.best {
        let candidate = p
            .points
            .iter()
            .find(|pt| pt.iteration == step.iteration)
            .map_or(String::from("-"), |pt| render::short_id(&pt.candidate));
        let after = p
            .elapsed_at(step.iteration)
            .map_or("-".into(), |e| format!("+{}", render::duration(e)));
        let gain = previous.map_or("-".into(), |prev| format!("×{:.2}", step.speedup / prev));
        let _ = writeln!(
            s,
            r#"<tr><td class="num">{}</td><td class="num">{}</td><td><code>{}</code></td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td></tr>"#,
            step.iteration,
            esc(&after),
            esc(&candidate),
            esc(&render::speedup(step.speedup)),
            esc(&render::percent(step.spread_pct)),
            esc(&gain)
        );
        previous = Some(step.speedup);
    }
    s.push_str("</table>\n");
    s
}

/// The best's lineage (issue #29): each step from its seed, its speedup, what changed, and
/// the source's diff (open by default, so a printed or captured page shows it).
fn lineage(p: &Progress) -> String {
    if p.lineage.is_empty() {
        return String::new();
    }
    let mut s = String::from("<h2>Lineage of the best</h2>\n<p>Each candidate descends from the goal's best when it was proposed (what its agent was given); the first from its seed.</p>\n");
    let _ = writeln!(
        s,
        "<table class=\"lineage\">\n<tr><th>iteration</th><th>candidate</th><th>agent</th><th>speedup (its first evaluation)</th><th>what changed</th></tr>"
    );
    for step in &p.lineage {
        let _ = writeln!(
            s,
            r#"<tr><td class="num">{}</td><td><code>{}</code></td><td>{}</td><td class="num">{}</td><td>{}</td></tr>"#,
            step.iteration,
            esc(&render::short_id(&step.candidate)),
            esc(&step.agent),
            esc(&step.speedup.map_or("-".into(), render::speedup)),
            esc(&step.changes.join("; "))
        );
        if let Some(d) = &step.diff {
            let _ = writeln!(s, "<tr><td></td><td colspan=\"4\"><details open><summary>source diff</summary><pre class=\"diff\">{}</pre></details></td></tr>", diff_html(d));
        }
    }
    s.push_str("</table>\n");
    s
}

fn diff_html(d: &str) -> String {
    d.lines()
        .map(|l| {
            let class = match l.chars().next() {
                Some('+') if !l.starts_with("+++") => "add",
                Some('-') if !l.starts_with("---") => "del",
                Some('@') => "hunk",
                _ => "",
            };
            match class {
                "" => esc(l),
                c => format!("<span class=\"{c}\">{}</span>", esc(l)),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::testdata::*;

    #[test]
    fn the_page_has_the_chart_and_a_row_per_best() {
        let mut p = sample();
        p.name = "mla <decode>".into();
        let html = page(&p);
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains("<title>mla &lt;decode&gt;: kerneld report</title>"));
        assert_eq!(html.matches("<svg ").count(), 1);
        let table = html.split("<table>").nth(1).unwrap();
        assert_eq!(table.matches("<tr>").count(), 1 + 5, "header and 5 bests");
        assert!(
            table.contains("12.0×") && table.contains("×1.33"),
            "{table}"
        );
        assert!(table.contains("<th>speedup (GPU time)</th>"), "{table}");
        assert!(html.contains("kernelctl best g -o best.py"));
        assert!(html.trim_end().ends_with("</html>"));
    }

    #[test]
    fn the_page_shows_the_bests_lineage_with_each_steps_diff() {
        let events = crate::lineage::tests::events();
        let p = Progress::from_events("g1", &events);
        let html = page(&p);
        let lineage = html.split("<h2>Lineage of the best</h2>").nth(1).unwrap();
        assert_eq!(
            lineage.matches("<tr><td class=\"num\">").count(),
            3,
            "{lineage}"
        );
        assert!(lineage.contains("BLOCK: 32 → 64"), "{lineage}");
        assert!(
            lineage.contains("<span class=\"add\">+    return 2</span>"),
            "{lineage}"
        );
    }
}
