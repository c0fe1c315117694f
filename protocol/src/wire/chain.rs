//! Chains (issue #29): a goal that waits for another goal to end before it runs, as
//! Slurm's `--dependency=afterok:JOB` / `afterany:JOB` (`kernelctl enqueue --after
//! GOAL[:completed|:any]`, or `after = "..."` in the goal file).

use serde::{Deserialize, Serialize};

/// What a chained goal waits for.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Chain {
    /// The goal waited for. As written (an id or a name) in a goal file or `--after`; the
    /// daemon resolves it at enqueue and stores the id, so a later goal of the same name
    /// is never mistaken for it.
    pub goal: String,
    #[serde(default)]
    pub require: ChainRequire,
}

/// How the goal waited for must end for the chained one to run.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ChainRequire {
    /// It must complete (a target met, a budget spent, a plateau, its space exhausted); a
    /// failed or cancelled one cancels the chained goal (Slurm's `afterok`).
    #[default]
    Completed,
    /// Any end will do: completed, failed or cancelled (Slurm's `afterany`).
    Any,
}

impl ChainRequire {
    pub fn as_str(self) -> &'static str {
        match self {
            ChainRequire::Completed => "completed",
            ChainRequire::Any => "any",
        }
    }
}

impl Chain {
    /// `GOAL`, `GOAL:completed` or `GOAL:any` (an id such as `g12`, or a goal's name).
    pub fn parse(text: &str) -> Result<Chain, String> {
        let text = text.trim();
        let (goal, require) = match text.rsplit_once(':') {
            None => (text, ChainRequire::Completed),
            Some((goal, "completed")) => (goal, ChainRequire::Completed),
            Some((goal, "any")) => (goal, ChainRequire::Any),
            Some((_, other)) => {
                return Err(format!(
                    "`{}` after the goal is not a condition; write GOAL:completed (run once \
                     GOAL completed; the default) or GOAL:any (run once GOAL ended, however)",
                    super::quote(other)
                ))
            }
        };
        let valid = !goal.is_empty()
            && goal
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid {
            return Err(format!(
                "`{}` is not a goal: name one by its id (g12) or its name (letters, digits, \
                 '-', '_' and '.'), e.g. after = \"nightly-revalidate:completed\"",
                super::quote(goal)
            ));
        }
        Ok(Chain {
            goal: goal.to_string(),
            require,
        })
    }
}

impl std::fmt::Display for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.goal, self.require.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_parse_with_completed_as_the_default() {
        assert_eq!(
            Chain::parse("reval").unwrap(),
            Chain {
                goal: "reval".into(),
                require: ChainRequire::Completed
            }
        );
        let any = Chain::parse("g12:any").unwrap();
        assert_eq!(any.require, ChainRequire::Any);
        assert_eq!(any.to_string(), "g12:any");
        assert_eq!(Chain::parse("a.b-c_d:completed").unwrap().goal, "a.b-c_d");
        let e = Chain::parse("g1:afterok").unwrap_err();
        assert!(e.contains("`afterok`") && e.contains("GOAL:any"), "{e}");
        for bad in ["", ":any", "a b", "x/y:any"] {
            assert!(Chain::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_stored_chain_reads_back_and_an_old_one_defaults() {
        let c: Chain = serde_json::from_str(r#"{"goal":"g3"}"#).unwrap();
        assert_eq!(c.require, ChainRequire::Completed);
        let text = serde_json::to_string(&Chain::parse("g3:any").unwrap()).unwrap();
        assert_eq!(text, r#"{"goal":"g3","require":"any"}"#);
    }
}
