//! The terminal, through well-kept crates: whether to colour (anstream's rules: `--color`,
//! NO_COLOR, CLICOLOR_FORCE, CLICOLOR, TERM=dumb, a TTY), the styles (anstyle), the width
//! (terminal_size), display widths (unicode-width) and local time (jiff).
//!
//! Everything returns strings, so it is tested without a terminal.

use std::io;

use unicode_width::UnicodeWidthChar;

// ---------------------------------------------------------------------------
// Colour
// ---------------------------------------------------------------------------

/// `--color`: when to colour what is printed (and clap's own help and errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorWhen {
    #[default]
    Auto,
    Always,
    Never,
}

impl ColorWhen {
    /// The same choice for clap's help and error messages.
    pub fn for_clap(self) -> clap::ColorChoice {
        match self {
            ColorWhen::Auto => clap::ColorChoice::Auto,
            ColorWhen::Always => clap::ColorChoice::Always,
            ColorWhen::Never => clap::ColorChoice::Never,
        }
    }

    /// `--color` as written on a command line that clap has not parsed yet (help and
    /// usage errors are printed while parsing, so they need it before): the last one wins.
    pub fn from_args(args: impl IntoIterator<Item = std::ffi::OsString>) -> ColorWhen {
        let mut when = ColorWhen::Auto;
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let arg = arg.to_string_lossy().into_owned();
            if arg == "--" {
                break;
            }
            let value = match arg.strip_prefix("--color") {
                Some("") => args.next().map(|v| v.to_string_lossy().into_owned()),
                Some(rest) => rest.strip_prefix('=').map(str::to_string),
                None => None,
            };
            when = match value.as_deref() {
                Some("always") => ColorWhen::Always,
                Some("never") => ColorWhen::Never,
                Some("auto") => ColorWhen::Auto,
                _ => when,
            };
        }
        when
    }
}

/// The colours this client uses, by meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Bold,
    Dim,
    Green,
    Yellow,
    Red,
    Cyan,
}

impl Style {
    fn anstyle(self) -> anstyle::Style {
        use anstyle::AnsiColor;
        match self {
            Style::Bold => anstyle::Style::new().bold(),
            Style::Dim => anstyle::Style::new().dimmed(),
            Style::Green => AnsiColor::Green.on_default(),
            Style::Yellow => AnsiColor::Yellow.on_default(),
            Style::Red => AnsiColor::Red.on_default(),
            Style::Cyan => AnsiColor::Cyan.on_default(),
        }
    }
}

/// Applies styles, or nothing when colour is off.
#[derive(Debug, Clone, Copy)]
pub struct Paint {
    pub enabled: bool,
}

impl Paint {
    pub const OFF: Paint = Paint { enabled: false };

    /// Colour on stdout as `--color` and the environment say. `Auto` follows anstream:
    /// NO_COLOR (non-empty) turns it off, else CLICOLOR_FORCE turns it on even for a pipe,
    /// else CLICOLOR=0 or TERM=dumb turn it off, else a terminal gets colour.
    pub fn for_stdout(when: ColorWhen) -> Paint {
        let choice = match when {
            ColorWhen::Auto => anstream::ColorChoice::Auto,
            ColorWhen::Always => anstream::ColorChoice::Always,
            ColorWhen::Never => anstream::ColorChoice::Never,
        };
        choice.write_global();
        let decided = anstream::AutoStream::choice(&io::stdout());
        Paint {
            enabled: decided != anstream::ColorChoice::Never,
        }
    }

    pub fn paint(&self, text: &str, style: Option<Style>) -> String {
        match style {
            Some(s) if self.enabled => {
                let s = s.anstyle();
                format!("{s}{text}{s:#}")
            }
            _ => text.to_string(),
        }
    }
}

/// The text without its escape sequences.
pub fn strip_ansi(text: &str) -> String {
    anstream::adapter::strip_str(text).to_string()
}

// ---------------------------------------------------------------------------
// Width
// ---------------------------------------------------------------------------

/// Columns `text` takes on a terminal (`×`, `…` one each; CJK two; escapes none).
pub fn width(text: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(strip_ansi(text).as_str())
}

/// The width of the terminal on stdout: the tty's own size, else $COLUMNS, else 80.
pub fn terminal_columns() -> usize {
    if let Some((terminal_size::Width(w), _)) = terminal_size::terminal_size_of(io::stdout()) {
        if w > 0 {
            return usize::from(w);
        }
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|&c| c > 0)
        .unwrap_or(80)
}

/// The first line of `text`, cut to `max` columns with an ellipsis.
pub fn truncate(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or("").trim_end();
    let more_lines = text.trim_end().lines().nth(1).is_some();
    if width(first) <= max && !more_lines {
        return first.to_string();
    }
    let mut cut = String::new();
    let mut used = 0;
    for c in first.chars() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > max {
            break;
        }
        cut.push(c);
        used += w;
    }
    format!("{}…", cut.trim_end())
}

/// Cuts an already coloured line to `max` visible columns: escape sequences take no room
/// and are kept, so the colours stay; a reset ends a cut line.
pub fn truncate_visible(text: &str, max: usize) -> String {
    if width(text) <= max {
        return text.to_string();
    }
    let mut out = String::new();
    let mut visible = 0;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            out.push(c);
            // CSI: ESC [ parameters, ended by a letter.
            for e in chars.by_ref() {
                out.push(e);
                if e.is_ascii_alphabetic() {
                    break;
                }
            }
            continue;
        }
        let w = c.width().unwrap_or(0);
        if visible + w + 1 > max {
            break;
        }
        out.push(c);
        visible += w;
    }
    out.push('…');
    out.push_str(&anstyle::Reset.render().to_string());
    out
}

// ---------------------------------------------------------------------------
// Time
// ---------------------------------------------------------------------------

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn civil(ms: u64, tz: &jiff::tz::TimeZone) -> jiff::civil::DateTime {
    let ts = i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    tz.to_datetime(ts)
}

/// The system's time zone (TZ, else /etc/localtime; UTC where neither says).
fn local() -> jiff::tz::TimeZone {
    jiff::tz::TimeZone::try_system().unwrap_or(jiff::tz::TimeZone::UTC)
}

fn datetime_in(ms: u64, tz: &jiff::tz::TimeZone) -> String {
    civil(ms, tz).strftime("%Y-%m-%d %H:%M:%S").to_string()
}

/// `2026-11-30 17:43:20`, local time.
pub fn datetime(ms: u64) -> String {
    datetime_in(ms, &local())
}

/// `17:43:20`, local time.
pub fn clock(ms: u64) -> String {
    civil(ms, &local()).strftime("%H:%M:%S").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_a_correct_calendar() {
        let utc = jiff::tz::TimeZone::UTC;
        assert_eq!(datetime_in(1_796_060_600_000, &utc), "2026-11-30 17:43:20");
        assert_eq!(datetime_in(0, &utc), "1970-01-01 00:00:00");
        assert_eq!(datetime_in(951_782_400_000, &utc), "2000-02-29 00:00:00");
        let berlin = jiff::tz::TimeZone::get("Europe/Berlin").unwrap();
        assert_eq!(
            datetime_in(1_796_060_600_000, &berlin),
            "2026-11-30 18:43:20"
        );
    }

    #[test]
    fn widths_are_display_columns() {
        assert_eq!(width("1.85×"), 5);
        assert_eq!(width("日本"), 4);
        assert_eq!(width("\x1b[31mred\x1b[0m"), 3);
        assert_eq!(truncate("日本語のテキスト", 7), "日本語…");
    }

    #[test]
    fn color_flag_is_read_before_parsing() {
        let args = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        assert_eq!(ColorWhen::from_args(args(&["status"])), ColorWhen::Auto);
        assert_eq!(
            ColorWhen::from_args(args(&["--color", "never", "status"])),
            ColorWhen::Never
        );
        assert_eq!(
            ColorWhen::from_args(args(&["status", "--color=always"])),
            ColorWhen::Always
        );
        assert_eq!(
            ColorWhen::from_args(args(&["show", "--", "--color=always"])),
            ColorWhen::Auto
        );
    }
}
