//! Candidate ids: the content address of a candidate (its source and its configuration),
//! computed over canonical JSON, so that one configuration has one id however an agent
//! wrote it (`{"B": 64}` and `{"B": 64.0}` are one candidate).
//!
//! Builds before the log's format 1 hashed serde_json's own text of the configuration;
//! for integer-valued settings (every task's today) that is the same text, and where it
//! is not, `CandidateIds::matches` still finds the old id, so a restart never re-runs a
//! candidate a log of an older build has.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The hash that names a candidate source (the first 16 hex digits of its SHA-256).
pub fn source_hash(source: &str) -> String {
    hex::encode(&Sha256::digest(source.as_bytes())[..8])
}

/// The id of a candidate: over its source and its configuration's canonical JSON.
pub fn candidate_id(source: &str, config: &Value) -> String {
    id_over(source, &canonical_json(config))
}

/// Both ids a candidate may have in a log: the canonical one, and the one builds before
/// format 1 wrote (serde_json's text of the configuration as proposed).
pub struct CandidateIds {
    pub canonical: String,
    pub legacy: String,
}

impl CandidateIds {
    pub fn of(source: &str, config: &Value) -> CandidateIds {
        CandidateIds {
            canonical: candidate_id(source, config),
            legacy: id_over(source, &config.to_string()),
        }
    }

    pub fn matches(&self, id: &str) -> bool {
        self.canonical == id || self.legacy == id
    }
}

fn id_over(source: &str, config_text: &str) -> String {
    let mut h = Sha256::new();
    h.update(source.as_bytes());
    h.update([0u8]);
    h.update(config_text.as_bytes());
    hex::encode(&h.finalize()[..8])
}

/// JSON with object keys sorted and one number format: a number with an integer value
/// is written as an integer (`64`, never `64.0`), any other as the shortest text that
/// reads back to the same double. No whitespace.
pub fn canonical_json(v: &Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut String) {
    match v {
        Value::Null | Value::Bool(_) | Value::String(_) => out.push_str(&v.to_string()),
        Value::Number(n) => {
            if n.is_i64() || n.is_u64() {
                out.push_str(&n.to_string());
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                // Integral and exactly representable: the integer's digits.
                if f.is_finite() && f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
                    out.push_str(&(f as i64).to_string());
                } else {
                    out.push_str(&n.to_string());
                }
            }
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_configuration_has_one_id_however_it_is_written() {
        let a = json!({"BLOCK": 64, "warps": 4, "nested": {"z": 1.5, "a": [1, 2.0]}});
        let b: Value =
            serde_json::from_str(r#"{"nested":{"a":[1.0,2],"z":1.50},"warps":4.0,"BLOCK":64}"#)
                .unwrap();
        assert_eq!(
            canonical_json(&a),
            r#"{"BLOCK":64,"nested":{"a":[1,2],"z":1.5},"warps":4}"#
        );
        assert_eq!(candidate_id("src", &a), candidate_id("src", &b));
        assert_ne!(candidate_id("src", &a), candidate_id("other", &a));
    }

    #[test]
    fn ids_of_integer_configurations_are_those_older_builds_wrote() {
        // The fixture log of build 339715e names this candidate 1851dc4d9f7bb583.
        let config = json!({"BLOCK_K": 32, "BLOCK_M": 32, "BLOCK_N": 32, "GROUP_M": 4,
                            "SPLIT_K": 1, "num_stages": 2, "num_warps": 4});
        let ids = CandidateIds::of("SPACE = {}\n", &config);
        assert_eq!(ids.canonical, ids.legacy);
        // A float-written configuration keeps its old id findable.
        let floats = json!({"BLOCK": 64.0});
        let ids = CandidateIds::of("s", &floats);
        assert_ne!(ids.canonical, ids.legacy);
        assert!(ids.matches(&id_over("s", r#"{"BLOCK":64.0}"#)));
        assert!(ids.matches(&candidate_id("s", &json!({"BLOCK": 64}))));
    }
}
