//! A written kernel's `SPACE` and `DEFAULT`, read from its source without running it, the
//! way the harness's `describe` reads literal ones (kernels/harness/evaluate.py
//! `_literal_space`): the hybrid agent tunes the structure its proposer wrote.
//!
//! Only Python literals of what a SPACE holds are understood (dicts, lists, tuples,
//! strings, numbers, True/False/None, comments); anything else gives None, and the hybrid
//! asks its proposer again instead of tuning.

use serde_json::{Map, Value};

/// `(SPACE, DEFAULT)` of a module whose top level assigns them literally; DEFAULT defaults
/// to each parameter's first value. None when SPACE is missing, not literal, or empty.
pub fn literal_space(source: &str) -> Option<(Value, Value)> {
    let space = assigned(source, "SPACE")?;
    let params = space.as_object()?;
    if params.is_empty()
        || !params
            .values()
            .all(|v| v.as_array().is_some_and(|a| !a.is_empty()))
    {
        return None;
    }
    let default = match assigned(source, "DEFAULT") {
        Some(d) if d.is_object() => d,
        Some(_) => return None,
        None => Value::Object(
            params
                .iter()
                .map(|(k, v)| (k.clone(), v[0].clone()))
                .collect::<Map<_, _>>(),
        ),
    };
    Some((space, default))
}

/// The value of a top-level `NAME = <literal>` (the last such assignment).
fn assigned(source: &str, name: &str) -> Option<Value> {
    let mut found = None;
    let mut offset = 0;
    for line in source.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let Some(rest) = rest.trim_start_matches([' ', '\t']).strip_prefix('=') else {
            continue;
        };
        if rest.starts_with('=') {
            continue; // a comparison, not an assignment
        }
        let from = start + (line.len() - rest.len());
        let mut p = Parser {
            s: &source.as_bytes()[from..],
            i: 0,
        };
        found = Some(p.value()?);
    }
    found
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    /// Skips blanks, newlines (inside brackets they continue the literal) and comments.
    fn blank(&mut self) {
        while let Some(&c) = self.s.get(self.i) {
            match c {
                b' ' | b'\t' | b'\r' | b'\n' | b'\\' => self.i += 1,
                b'#' => {
                    while self.s.get(self.i).is_some_and(|&c| c != b'\n') {
                        self.i += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn value(&mut self) -> Option<Value> {
        self.blank();
        match *self.s.get(self.i)? {
            b'{' => self.dict(),
            b'[' => self.seq(b']'),
            b'(' => self.seq(b')'),
            b'"' | b'\'' => self.string().map(Value::String),
            _ => self.word(),
        }
    }

    fn dict(&mut self) -> Option<Value> {
        self.i += 1;
        let mut m = Map::new();
        loop {
            self.blank();
            if self.s.get(self.i) == Some(&b'}') {
                self.i += 1;
                return Some(Value::Object(m));
            }
            let key = match self.value()? {
                Value::String(k) => k,
                _ => return None, // SPACE and DEFAULT are keyed by parameter names
            };
            self.blank();
            if self.s.get(self.i) != Some(&b':') {
                return None;
            }
            self.i += 1;
            let v = self.value()?;
            m.insert(key, v);
            if !self.comma_or(b'}') {
                return None;
            }
        }
    }

    fn seq(&mut self, close: u8) -> Option<Value> {
        self.i += 1;
        let mut items = Vec::new();
        loop {
            self.blank();
            if self.s.get(self.i) == Some(&close) {
                self.i += 1;
                return Some(Value::Array(items));
            }
            items.push(self.value()?);
            if !self.comma_or(close) {
                return None;
            }
        }
    }

    /// After an item: a comma (consumed), or the closing bracket (left for the caller).
    fn comma_or(&mut self, close: u8) -> bool {
        self.blank();
        match self.s.get(self.i) {
            Some(b',') => {
                self.i += 1;
                true
            }
            Some(&c) => c == close,
            None => false,
        }
    }

    fn string(&mut self) -> Option<String> {
        let quote = self.s[self.i];
        self.i += 1;
        let mut out = Vec::new();
        while let Some(&c) = self.s.get(self.i) {
            self.i += 1;
            match c {
                b'\\' => {
                    out.push(*self.s.get(self.i)?);
                    self.i += 1;
                }
                b'\n' => return None,
                c if c == quote => return String::from_utf8(out).ok(),
                c => out.push(c),
            }
        }
        None
    }

    /// A number, True, False or None.
    fn word(&mut self) -> Option<Value> {
        let start = self.i;
        while self
            .s
            .get(self.i)
            .is_some_and(|c| c.is_ascii_alphanumeric() || b"+-._".contains(c))
        {
            self.i += 1;
        }
        let w = std::str::from_utf8(&self.s[start..self.i]).ok()?;
        match w {
            "True" => Some(Value::Bool(true)),
            "False" => Some(Value::Bool(false)),
            "None" => Some(Value::Null),
            _ => {
                let w = w.replace('_', "");
                if let Ok(n) = w.parse::<i64>() {
                    return Some(n.into());
                }
                let f = w.parse::<f64>().ok().filter(|f| f.is_finite())?;
                serde_json::Number::from_f64(f).map(Value::Number)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_the_demo_seeds_space_and_default() {
        let src = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels/demo/seeds/tiled.py"),
        )
        .unwrap();
        let (space, default) = literal_space(&src).expect("a literal SPACE");
        assert!(
            space["BLOCK_M"].as_array().is_some_and(|a| a.len() > 1),
            "{space}"
        );
        assert_eq!(default["BLOCK_M"], 32);
    }

    #[test]
    fn python_spellings_and_a_missing_default() {
        let src = "import triton\nSPACE = {  # tiles\n    'B': [16, 32,],\n    \"W\": (2, 4),\n    'F': [True, False, None, 1e-3],\n}\n";
        let (space, default) = literal_space(src).unwrap();
        assert_eq!(
            space,
            json!({"B": [16, 32], "W": [2, 4], "F": [true, false, null, 0.001]})
        );
        assert_eq!(default, json!({"B": 16, "W": 2, "F": true}));
    }

    #[test]
    fn no_literal_no_space() {
        assert!(literal_space("SPACE = make_space()\n").is_none());
        assert!(literal_space("SPACE = {}\n").is_none());
        assert!(literal_space("SPACE = {'B': []}\n").is_none());
        assert!(literal_space("x = 1\n").is_none());
        assert!(literal_space("SPACE == {'B': [1]}\n").is_none());
        assert!(literal_space("SPACE = {'B': [1, 2]\n").is_none());
    }
}
