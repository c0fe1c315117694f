//! `kernelctl revalidate GOAL [--top N]`: re-measure the goal's best few candidates now
//! and say whether each still holds its win beyond noise (the daemon records the verdict
//! in the log as `revalidated`).

use std::collections::BTreeMap;
use std::time::Duration;

use kerneld_protocol::wire::{
    method, Event, EventKind, EventsParams, RevalidateParams, RevalidateTicket,
};

use crate::client::decode;
use crate::failure::Failure;
use crate::render::short_id;
use crate::Ctx;

/// How often the log is read while waiting.
const POLL: Duration = Duration::from_millis(500);

pub(crate) fn command(
    ctx: &Ctx,
    goal: String,
    top: Option<u32>,
    wait: bool,
) -> Result<u8, Failure> {
    let params = RevalidateParams { goal, top };
    let value = ctx.call_value(method::REVALIDATE, &params)?;
    let ticket: RevalidateTicket = decode(method::REVALIDATE, value.clone())?;
    if !wait {
        if ctx.json {
            ctx.print_json(&value)?;
        } else {
            for r in &ticket.requests {
                ctx.print_line(&format!(
                    "{}: request {}: revalidate #{} {}",
                    ticket.goal,
                    r.request,
                    r.iteration,
                    short_id(&r.candidate)
                ))?;
            }
        }
        return Ok(0);
    }
    ctx.note(&format!(
        "{}: re-measuring {} candidates (a fresh runner against a fresh baseline each)",
        ticket.goal,
        ticket.requests.len()
    ));
    let after = ticket.requests.iter().map(|r| r.request).min().unwrap_or(1) - 1;
    let mut verdicts: BTreeMap<u64, Event> = BTreeMap::new();
    while verdicts.len() < ticket.requests.len() {
        let page = EventsParams {
            goal: Some(ticket.goal.clone()),
            after: Some(after),
            limit: None,
            follow: false,
        };
        let events: Vec<Event> = decode(method::EVENTS, ctx.call_value(method::EVENTS, &page)?)?;
        for e in events {
            if let EventKind::Revalidated { request, .. } = &e.kind {
                if ticket.requests.iter().any(|r| r.request == *request) {
                    verdicts.insert(*request, e);
                }
            }
        }
        if verdicts.len() < ticket.requests.len() {
            std::thread::sleep(POLL);
        }
    }
    if ctx.json {
        let list: Vec<&Event> = verdicts.values().collect();
        ctx.print_json(&serde_json::to_value(list).unwrap_or_default())?;
        return Ok(0);
    }
    let mut lost = 0;
    for e in verdicts.values() {
        if let EventKind::Revalidated {
            iteration,
            candidate,
            held,
            reason,
            ..
        } = &e.kind
        {
            if !held {
                lost += 1;
            }
            ctx.print_line(&format!(
                "#{iteration} {}  {}  {reason}",
                short_id(candidate),
                if *held { "holds" } else { "LOST" }
            ))?;
        }
    }
    // Exit 1 when a win did not hold: a script can tell.
    Ok(u8::from(lost > 0))
}
