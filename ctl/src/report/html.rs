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
code {{ font-size: 0.95em; }}
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
}
