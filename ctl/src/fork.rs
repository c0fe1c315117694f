//! `kernelctl fork GOAL[@SEQ] [--name N] [--budget KEY=VALUE ...] [--agent FILE]`.

use std::path::Path;

use kerneld_protocol::wire::{method, ForkParams, ForkResult};

use crate::client::decode;
use crate::failure::Failure;
use crate::Ctx;

pub(crate) fn command(
    ctx: &Ctx,
    goal: &str,
    name: Option<String>,
    budget: Vec<String>,
    agent: Option<&Path>,
) -> Result<u8, Failure> {
    let (goal, seq) = split_at_seq(goal)?;
    let agent = match agent {
        Some(file) => {
            let limit = kerneld_protocol::limits::GOAL_FILE_BYTES;
            Some(
                kerneld_protocol::userfile::read_regular(file, limit)
                    .map_err(|e| Failure::Failed(format!("--agent {}", e.describe(file, limit))))?,
            )
        }
        None => None,
    };
    let params = ForkParams {
        goal,
        seq,
        name,
        budget,
        agent,
    };
    let value = ctx.call_value(method::FORK, &params)?;
    if ctx.json {
        ctx.print_json(&value)?;
        return Ok(0);
    }
    let r: ForkResult = decode(method::FORK, value)?;
    ctx.note(&format!(
        "{} ({}) forked from {}@{}: {} evaluation(s) carried over{}",
        r.id,
        r.name,
        r.from,
        r.seq,
        r.evaluations,
        r.best_iteration
            .map_or(String::new(), |i| format!(", best from iteration {i}"))
    ));
    ctx.print_line(&r.id)?;
    Ok(0)
}

/// `GOAL@SEQ` -> (GOAL, Some(SEQ)); a goal name cannot hold '@'.
fn split_at_seq(arg: &str) -> Result<(String, Option<u64>), Failure> {
    match arg.rsplit_once('@') {
        None => Ok((arg.to_string(), None)),
        Some((goal, seq)) => seq
            .parse::<u64>()
            .map(|n| (goal.to_string(), Some(n)))
            .map_err(|_| {
                Failure::Failed(format!(
                    "`{arg}`: after @ comes an event number (see `kernelctl events {goal}`)"
                ))
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goal_at_seq() {
        assert_eq!(split_at_seq("g3").unwrap(), ("g3".into(), None));
        assert_eq!(
            split_at_seq("night@42").unwrap(),
            ("night".into(), Some(42))
        );
        assert!(split_at_seq("night@x").is_err());
    }
}
