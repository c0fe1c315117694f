//! The commands that read the event log: `events` (a page at a time, or followed),
//! `watch` (events above a status line redrawn in place) and `report` (a goal's whole
//! history, drawn by report/).

use std::io::{self, IsTerminal};
use std::path::Path;

use kerneld_protocol::wire::{method, Event, EventsParams, GoalState, GoalSummary, StatusParams};
use serde_json::Value;

use crate::client::{decode, ClientError};
use crate::render::{self, Paint};
use crate::{is_stdout, write_file, write_stdout, Ctx, Failure};

/// One event for people; an event type this client does not know still gets a line.
fn event_text(value: &Value, paint: Paint, fit: render::Fit) -> String {
    match serde_json::from_value::<Event>(value.clone()) {
        Ok(ev) => render::event_line(&ev, paint, fit),
        Err(_) => format!(
            "{:>6}  {}  {}",
            value.get("seq").and_then(Value::as_u64).unwrap_or(0),
            render::datetime(value.get("time_ms").and_then(Value::as_u64).unwrap_or(0)),
            value
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("unknown"),
        ),
    }
}

fn print_event(ctx: &Ctx, value: &Value) -> Result<(), Failure> {
    if ctx.json {
        ctx.print_line(&value.to_string())
    } else {
        ctx.print_line(&event_text(value, ctx.paint, ctx.fit))
    }
}

pub fn events(ctx: &Ctx, params: EventsParams) -> Result<u8, Failure> {
    if !params.follow {
        if params.limit.is_some() {
            let list: Vec<Value> =
                decode(method::EVENTS, ctx.call_value(method::EVENTS, &params)?)?;
            for value in &list {
                print_event(ctx, value)?;
            }
            return Ok(0);
        }
        // Everything: the daemon answers a page at a time; an empty page means the end.
        let mut page = EventsParams {
            after: Some(params.after.unwrap_or(0)),
            ..params
        };
        loop {
            let list: Vec<Value> = decode(method::EVENTS, ctx.call_value(method::EVENTS, &page)?)?;
            let Some(last) = list
                .last()
                .and_then(|v| v.get("seq"))
                .and_then(Value::as_u64)
            else {
                return Ok(0);
            };
            for value in &list {
                print_event(ctx, value)?;
            }
            page.after = Some(last);
        }
    }
    let (backlog, mut stream) = ctx.connect()?.follow(params)?;
    for value in &backlog {
        print_event(ctx, value)?;
    }
    while let Some(value) = stream.next_event()? {
        print_event(ctx, &value)?;
    }
    Err(ClientError::Closed {
        socket: ctx.socket.clone(),
    }
    .into())
}

/// How many past events `watch` shows before the live ones.
const WATCH_BACKLOG: u64 = 8;

pub fn watch(ctx: &Ctx, goal: String) -> Result<u8, Failure> {
    let id = goal_summary(ctx, &goal)?.id;
    let params = EventsParams {
        goal: Some(id.clone()),
        limit: Some(WATCH_BACKLOG),
        ..Default::default()
    };
    let (backlog, mut stream) = ctx.connect()?.follow(params)?;
    let mut view = WatchView::new(ctx);
    for value in &backlog {
        view.event(value)?;
    }
    // Read after subscribing: whatever changes from here on arrives as an event.
    let mut summary = goal_summary(ctx, &id)?;
    view.status(&summary)?;
    while !summary.state.is_terminal() {
        let Some(value) = stream.next_event()? else {
            view.end()?;
            return Err(ClientError::Closed {
                socket: ctx.socket.clone(),
            }
            .into());
        };
        view.event(&value)?;
        summary = goal_summary(ctx, &id)?;
        view.status(&summary)?;
    }
    view.end()?;
    Ok(if summary.state == GoalState::Completed {
        0
    } else {
        1
    })
}

fn goal_summary(ctx: &Ctx, goal: &str) -> Result<GoalSummary, Failure> {
    let value = ctx.call_value(
        method::STATUS,
        StatusParams {
            goal: Some(goal.to_string()),
            ..Default::default()
        },
    )?;
    let goals: Vec<GoalSummary> = decode(method::STATUS, value)?;
    goals
        .into_iter()
        .next()
        .ok_or_else(|| Failure::Failed(format!("no goal {goal}")))
}

/// What `watch` prints. On a terminal: events scroll by above a status line redrawn in place.
/// Elsewhere (a pipe, cron): one timestamped status line whenever it changes.
/// With --json: the events as JSON lines.
struct WatchView<'a> {
    ctx: &'a Ctx,
    live: bool,
    /// A status line is on screen without its newline (terminal mode).
    pending: bool,
    last: String,
}

impl<'a> WatchView<'a> {
    fn new(ctx: &'a Ctx) -> Self {
        WatchView {
            ctx,
            live: io::stdout().is_terminal() && !ctx.json && !ctx.quiet,
            pending: false,
            last: String::new(),
        }
    }

    fn event(&mut self, value: &Value) -> Result<(), Failure> {
        if self.ctx.json {
            return self.ctx.print_line(&value.to_string());
        }
        if self.live {
            self.clear()?;
            let columns = render::terminal_columns();
            self.ctx.print_line(&render::truncate_visible(
                &event_text(value, self.ctx.paint, self.ctx.fit),
                columns,
            ))?;
        }
        Ok(())
    }

    fn status(&mut self, summary: &GoalSummary) -> Result<(), Failure> {
        if self.ctx.json {
            return Ok(());
        }
        let plain = render::status_line(summary, Paint::OFF, self.ctx.fit);
        if self.live {
            // One column short of the width: a full line would wrap and break the redraw.
            let columns = render::terminal_columns().saturating_sub(1);
            let line = render::truncate_visible(
                &render::status_line(summary, self.ctx.paint, self.ctx.fit),
                columns,
            );
            self.clear()?;
            self.ctx.print(&line)?;
            self.pending = true;
        } else if plain != self.last {
            self.ctx
                .print_line(&format!("{}  {plain}", render::clock(render::now_ms())))?;
        }
        self.last = plain;
        Ok(())
    }

    fn clear(&mut self) -> Result<(), Failure> {
        if self.pending {
            self.pending = false;
            self.ctx.print("\r\x1b[2K")?;
        }
        Ok(())
    }

    fn end(&mut self) -> Result<(), Failure> {
        if self.pending {
            self.pending = false;
            self.ctx.print("\n")?;
        }
        Ok(())
    }
}

/// Events per `events` call while reading a goal's whole history.
const REPORT_PAGE: u64 = 500;

pub fn report(ctx: &Ctx, goal: String, output: Option<&Path>) -> Result<u8, Failure> {
    // A name we cannot write is refused before the daemon is asked anything.
    let format = output
        .map(crate::report::Format::for_path)
        .transpose()
        .map_err(Failure::Failed)?;
    let events = all_events(ctx, Some(&goal))?;
    let progress = crate::report::Progress::from_events(&goal, &events);
    match (output, format) {
        (Some(path), Some(format)) => {
            let bytes = format.render(&progress).map_err(Failure::Failed)?;
            if is_stdout(path) {
                // `-o -` names stdout as the file: written even with --quiet.
                write_stdout(&String::from_utf8_lossy(&bytes))?;
            } else {
                write_file(path, &bytes)?;
                ctx.note(&format!(
                    "wrote {}: {}",
                    path.display(),
                    progress.headline()
                ));
            }
        }
        _ if ctx.json => {
            ctx.print_line(&serde_json::to_string_pretty(&progress).unwrap_or_default())?
        }
        _ => ctx.print(&crate::report::terminal(
            &progress,
            render::terminal_columns(),
            ctx.paint,
        ))?,
    }
    Ok(0)
}

/// Every event of a goal (or of the whole log), oldest first, read page by page (an event of a type this
/// client does not know is skipped: the chart has no use for it).
pub(crate) fn all_events(ctx: &Ctx, goal: Option<&str>) -> Result<Vec<Event>, Failure> {
    let mut client = ctx.connect()?;
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let params = EventsParams {
            goal: goal.map(str::to_string),
            after: Some(after),
            limit: Some(REPORT_PAGE),
            follow: false,
        };
        let page: Vec<Value> = client.call(method::EVENTS, &params)?;
        let count = page.len() as u64;
        let start = after;
        for value in page {
            after = after.max(value.get("seq").and_then(Value::as_u64).unwrap_or(after));
            events.extend(serde_json::from_value::<Event>(value).ok());
        }
        if count < REPORT_PAGE || after == start {
            return Ok(events);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_event_types_still_print() {
        let v = serde_json::json!({"seq": 9, "time_ms": 0, "type": "from_the_future"});
        assert!(event_text(&v, Paint::OFF, render::Fit::Cut).ends_with("from_the_future"));
    }
}
