//! Rejections with `file:line:column: message`: positions from toml's spans, and type
//! errors worded from the schema's own list of what each key takes.

use std::ops::Range;

/// A rejection: where in the file, and what is expected there.
#[derive(Debug, Clone, PartialEq)]
pub struct GoalError {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl std::fmt::Display for GoalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.column, self.message
        )
    }
}

impl std::error::Error for GoalError {}

/// 1-based line and column of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rfind('\n').map_or(offset, |nl| offset - nl - 1) + 1;
    (line, column)
}

pub(super) struct Ctx<'a> {
    pub(super) file: &'a str,
    pub(super) text: &'a str,
}

impl Ctx<'_> {
    pub(super) fn err(&self, span: Range<usize>, message: impl Into<String>) -> GoalError {
        let (line, column) = line_col(self.text, span.start);
        GoalError {
            file: self.file.to_string(),
            line,
            column,
            message: message.into(),
        }
    }
}

/// Where the goal file format is described, appended to toml's own messages.
const SEE: &str = "(see SPEC section 4 for the goal file format)";

/// A syntax error or an unknown key, as toml reports it, at its span.
pub(super) fn toml_error(cx: &Ctx<'_>, e: &toml::de::Error) -> GoalError {
    cx.err(
        e.span().unwrap_or(0..0),
        format!("{} {SEE}", e.message().trim()),
    )
}

/// What a key's value must be.
#[derive(Clone, Copy, PartialEq)]
enum Want {
    Str,
    Int,
    /// An integer or a decimal number.
    Num,
    StrList,
    /// `seed`: a file name or a list of them.
    StrOrList,
    Table,
}

/// Every key of the schema (`schema::RawGoal`) with the type of its value.
const TYPES: &[(&str, Want)] = &[
    ("name", Want::Str),
    ("task", Want::Str),
    ("objective", Want::Str),
    ("baseline", Want::Str),
    ("shapes", Want::StrList),
    ("timing", Want::Str),
    ("seed", Want::StrOrList),
    ("notify", Want::StrList),
    ("after", Want::Str),
    ("budget", Want::Table),
    ("budget.wall", Want::Str),
    ("budget.iterations", Want::Int),
    ("budget.gpu_hours", Want::Num),
    ("budget.tokens", Want::Int),
    ("budget.cost", Want::Num),
    ("budget.price_per_1k_tokens", Want::Num),
    ("stop", Want::Table),
    ("stop.target_speedup", Want::Num),
    ("stop.plateau", Want::Int),
    ("agent", Want::Table),
    ("agent.kind", Want::Str),
    ("agent.url", Want::Str),
    ("agent.model", Want::Str),
    ("agent.api_key_env", Want::Str),
    ("agent.temperature", Want::Num),
    ("agent.command", Want::StrList),
    ("agent.timeout", Want::Str),
    ("agent.context_bytes", Want::Int),
    ("resources", Want::Table),
    ("resources.gpus", Want::Int),
    ("resources.priority", Want::Int),
];

/// Checks the type of every known key's value, in the order of the file, so a mistake is
/// reported in plain words at the value (`budget.iterations` must be an integer, not a
/// string: write iterations = 1000). Syntax errors are toml's, with its span.
pub(super) fn check_types(cx: &Ctx<'_>) -> Result<(), GoalError> {
    let doc = toml_edit::ImDocument::parse(cx.text).map_err(|e| {
        cx.err(
            e.span().unwrap_or(0..0),
            format!("{} {SEE}", e.message().trim()),
        )
    })?;
    let mut wrong: Vec<(Range<usize>, String)> = Vec::new();
    for &(path, want) in TYPES {
        let (table, key) = match path.split_once('.') {
            Some((t, k)) => match doc.get(t).and_then(toml_edit::Item::as_table_like) {
                Some(t) => (t, k),
                None => continue,
            },
            None => (doc.as_table() as &dyn toml_edit::TableLike, path),
        };
        let Some(item) = table.get(key) else { continue };
        if let Some(message) = mismatch(cx.text, path, key, want, item) {
            wrong.push((item.span().unwrap_or(0..0), message));
        }
    }
    match wrong.into_iter().min_by_key(|(span, _)| span.start) {
        Some((span, message)) => Err(cx.err(span, message)),
        None => Ok(()),
    }
}

/// The message for a value of the wrong type, or None when it fits.
fn mismatch(
    text: &str,
    path: &str,
    key: &str,
    want: Want,
    item: &toml_edit::Item,
) -> Option<String> {
    use toml_edit::Value as V;
    let value = item.as_value();
    let fits = match (want, value) {
        (Want::Table, _) => item.is_table_like(),
        (Want::Str, Some(V::String(_))) | (Want::Int, Some(V::Integer(_))) => true,
        (Want::Num, Some(V::Integer(_) | V::Float(_))) => true,
        (Want::StrList, Some(V::Array(a))) => a.iter().all(V::is_str),
        (Want::StrOrList, Some(V::String(_))) => true,
        (Want::StrOrList, Some(V::Array(a))) => a.iter().all(V::is_str),
        _ => false,
    };
    if fits {
        return None;
    }
    if want == Want::StrOrList {
        return Some(
            "`seed` must be a file name or a list of file names: write seed = \"splitkv.py\" \
             or seed = [\"a.py\", \"b.py\"]"
                .into(),
        );
    }
    let want_words = match want {
        Want::Str => "a string (in quotes)",
        Want::Int => "an integer",
        Want::Num => "a number",
        Want::StrList => "a list of strings (in quotes)",
        Want::Table => "a table",
        Want::StrOrList => unreachable!("answered above"),
    };
    let got = match value {
        None => "a table",
        Some(V::String(_)) => "a string",
        Some(V::Integer(_)) => "an integer",
        Some(V::Float(_)) => "a decimal number",
        Some(V::Boolean(_)) => "true/false",
        Some(V::Datetime(_)) => "a date",
        Some(V::Array(_)) if want == Want::StrList => "a list with other values than strings",
        Some(V::Array(_)) => "a list",
        Some(V::InlineTable(_)) => "a table",
    };
    let quoted = value.and_then(V::as_str).map(str::trim);
    let written = item
        .span()
        .and_then(|s| text.get(s))
        .map(str::trim)
        .unwrap_or("");
    let fix = match (want, quoted, value) {
        (Want::Int, Some(q), _) if q.parse::<i64>().is_ok() => format!(": write {key} = {q}"),
        (Want::Num, Some(q), _) if q.parse::<f64>().is_ok() => format!(": write {key} = {q}"),
        (Want::Str, None, Some(V::Integer(_) | V::Float(_) | V::Boolean(_) | V::Datetime(_))) => {
            format!(": write {key} = \"{written}\"")
        }
        _ => String::new(),
    };
    Some(format!("`{path}` must be {want_words}, not {got}{fix}"))
}
