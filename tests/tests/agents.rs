//! The `command` agent through the real daemon: an external program reads the files the
//! daemon prepares and writes the next candidate; a failing program fails the goal after a
//! few tries, with its output in the reason.

use std::time::Duration;

use kerneld::wire::{EventKind, GoalState, ResultClass};
use kerneld_e2e::*;

fn goal_with_command(
    dir: &std::path::Path,
    name: &str,
    command: &str,
    iterations: u64,
) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "name = \"{name}\"\ntask = \"demo\"\n[budget]\niterations = {iterations}\n\
             [agent]\nkind = \"command\"\ncommand = {command}\ntimeout = \"2m\"\n"
        ),
    )
    .unwrap();
    path
}

/// A `CandidateProposed` event's fields, in log order.
struct Proposed {
    agent: String,
    config: serde_json::Value,
    note: Option<String>,
    source: Option<String>,
}

fn proposals(events: &[kerneld::wire::Event]) -> Vec<Proposed> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::CandidateProposed {
                agent,
                config,
                note,
                source,
                ..
            } => Some(Proposed {
                agent: agent.clone(),
                config: config.clone(),
                note: note.clone(),
                source: source.clone(),
            }),
            _ => None,
        })
        .collect()
}

#[test]
fn an_external_program_proposes_candidates() {
    let dir = TempDir::new("agent");
    let d = Daemon::start(dir.path());
    let script = dir.path().join("agent.sh");
    // `kernelctl context` while the program runs: exactly its CONTEXT.md on stdout, the
    // other files named on stderr.
    let view = format!(
        "'{}' --socket '{}' context ext > ../view.md 2> ../view.err\n",
        binary("kernelctl").display(),
        d.socket.display()
    );
    std::fs::write(
        &script,
        view + r#"set -e
grep -q 'matmul(inputs' GOAL.md
grep -q '# Goal' CONTEXT.md
cmp CONTEXT.md ../view.md
grep -q 'the command also gets GOAL.md' ../view.err
grep -q 'seeds/tiled.py' ../view.err
cp seeds/tiled.py candidate.py
case "$KERNELD_ITERATION" in
  1) echo '{"BLOCK_M": 16}' > config.json ;;
  *) test -f best.py && test -f last_report.json; echo '{"BLOCK_M": 64}' > config.json ;;
esac
echo "BLOCK_M for iteration $KERNELD_ITERATION" > NOTE.md
"#,
    )
    .unwrap();
    let goal = goal_with_command(
        dir.path(),
        "ext",
        &format!("[\"sh\", \"{}\"]", script.display()),
        2,
    );
    let id = enqueue(&d, &goal);
    let g = d.wait_terminal(&id, Duration::from_secs(180));
    assert_eq!(g.state, GoalState::Completed, "{g:?}\n{}", d.log_text());
    assert_eq!(g.reason.as_deref(), Some("budget_iterations"));

    let events = d.events(0);
    let proposals = proposals(&events);
    for p in &proposals {
        assert!(p
            .source
            .as_deref()
            .is_some_and(|s| s.contains("def matmul")));
    }
    assert_eq!(proposals.len(), 2);
    assert_eq!(proposals[0].agent, "command");
    assert_eq!(proposals[0].config, serde_json::json!({"BLOCK_M": 16}));
    assert_eq!(
        proposals[1].note.as_deref(),
        Some("BLOCK_M for iteration 2")
    );
    let ok = events
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::EvaluationFinished { result, .. } if result.class == ResultClass::Ok))
        .count();
    assert_eq!(ok, 2);

    // The winner comes back through `best`, source and all.
    let file = dir.path().join("best.py");
    let out = kernelctl(&d.socket, &["best", &id, "-o", file.to_str().unwrap()]);
    assert!(out.status.success());
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("def matmul"));
    // The agent proposed only BLOCK_M; the BEST written is what ran, defaults filled in,
    // so the file works as is.
    let best_line = text
        .lines()
        .rev()
        .find(|l| l.starts_with("BEST = "))
        .expect("a BEST line");
    for key in ["\"BLOCK_M\"", "\"BLOCK_N\"", "\"BLOCK_K\"", "\"num_warps\""] {
        assert!(best_line.contains(key), "{best_line}");
    }
}

#[test]
fn a_failing_program_fails_the_goal_with_its_output() {
    let dir = TempDir::new("agentfail");
    let d = Daemon::start(dir.path());
    let goal = goal_with_command(
        dir.path(),
        "broken",
        r#"["sh", "-c", "echo model unreachable >&2; exit 3"]"#,
        5,
    );
    let id = enqueue(&d, &goal);
    let g = d.wait_terminal(&id, Duration::from_secs(120));
    assert_eq!(g.state, GoalState::Failed);
    let reason = g.reason.unwrap_or_default();
    assert!(
        reason.contains("3 times in a row") && reason.contains("model unreachable"),
        "{reason}"
    );
    assert_eq!(g.evaluations, 0);
    // Each failure is in the log, not only in the daemon's stderr.
    let failures: Vec<u32> = d
        .events(0)
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AgentFailed {
                failures, message, ..
            } => {
                assert!(message.contains("model unreachable"), "{message}");
                Some(*failures)
            }
            _ => None,
        })
        .collect();
    assert_eq!(failures, vec![1, 2, 3]);
}

/// A stand-in for an OpenAI-compatible endpoint (this machine runs no model): it records
/// each request (path, key, body) with what `look` returned while the request waited, and
/// answers with the demo seed and a configuration.
fn serve_chat_completions(
    requests: usize,
    look: impl Fn() -> serde_json::Value + Send + 'static,
) -> (String, std::thread::JoinHandle<Vec<serde_json::Value>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seed = std::fs::read_to_string(repo_root().join("kernels/demo/seeds/tiled.py")).unwrap();
    let handle = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for (i, stream) in listener.incoming().take(requests).enumerate() {
            let mut stream = stream.unwrap();
            let req = read_http_request(&stream);
            seen.push(serde_json::json!({"path": req.path, "auth": req.auth, "body": req.body, "look": look()}));
            let block_m = if i == 0 { 16 } else { 64 };
            let config = serde_json::json!({"BLOCK_M": block_m});
            let text = chat_reply("Smaller tiles first.", &seed, &config, None);
            write_http(&mut stream, "200 OK", "", &text);
        }
        seen
    });
    (url, handle)
}

#[test]
fn a_chat_completions_endpoint_proposes_candidates() {
    let dir = TempDir::new("llm");
    let d = Daemon::start_env(dir.path(), &[], &[("KD_TEST_KEY", "secret-key")]);
    // While the model "thinks", `kernelctl context` shows what it was sent.
    let socket = d.socket.clone();
    let (url, server) = serve_chat_completions(2, move || {
        let json = kernelctl(&socket, &["--json", "context", "llm"]);
        let plain = kernelctl(&socket, &["context", "llm"]);
        assert!(json.status.success() && plain.status.success());
        serde_json::json!({
            "json": serde_json::from_slice::<serde_json::Value>(&json.stdout).unwrap(),
            "plain": String::from_utf8(plain.stdout).unwrap(),
        })
    });
    let goal = dir.path().join("llm.toml");
    // A budget smaller than the demo seed (4.6 KB): the prompt clips the source to fit.
    let budget = 4096;
    std::fs::write(
        &goal,
        format!(
            "name = \"llm\"\ntask = \"demo\"\n[budget]\niterations = 2\n\
             [agent]\nkind = \"llm\"\nurl = \"{url}\"\nmodel = \"test-model\"\napi_key_env = \"KD_TEST_KEY\"\n\
             context_bytes = {budget}\n"
        ),
    )
    .unwrap();
    let id = enqueue(&d, &goal);
    let g = d.wait_terminal(&id, Duration::from_secs(180));
    assert_eq!(g.state, GoalState::Completed, "{g:?}\n{}", d.log_text());
    assert_eq!(g.evaluations, 2);

    let seen = server.join().unwrap();
    for r in &seen {
        assert_eq!(r["path"], "/v1/chat/completions");
        assert_eq!(r["auth"], "Bearer secret-key");
        assert_eq!(r["body"]["model"], "test-model");
        let system = r["body"]["messages"][0]["content"].as_str().unwrap();
        assert!(
            system.contains("# Goal `llm`") && system.contains("matmul(inputs"),
            "{system}"
        );
    }
    for r in &seen {
        // `kernelctl context` is exactly what the model got: --json the messages as sent,
        // plain each message whole under its own header line.
        let messages = &r["body"]["messages"];
        assert_eq!(r["look"]["json"]["messages"], *messages);
        assert_eq!(r["look"]["json"]["agent"], "llm");
        let mut plain = String::new();
        let mut bytes = 0;
        for m in messages.as_array().unwrap() {
            let content = m["content"].as_str().unwrap();
            bytes += content.len();
            plain += &format!(
                "===== {} ({} bytes) =====\n{content}",
                m["role"].as_str().unwrap(),
                content.len()
            );
            if !content.ends_with('\n') {
                plain.push('\n');
            }
        }
        assert_eq!(r["look"]["plain"], plain);
        // The whole prompt within the goal's budget, the source clipped to fit.
        assert!(bytes <= budget, "{bytes} bytes > {budget}");
        let user = messages[1]["content"].as_str().unwrap();
        assert!(
            user.contains("lines omitted to fit the prompt's budget"),
            "{user}"
        );
        assert!(
            user.contains("import triton\n") && user.contains("SPACE = {\n"),
            "the head and the parameter space are kept: {user}"
        );
    }
    // The second request carries the first result: the context and the best so far, its
    // timings marked as the interpreter's (this machine has no GPU).
    let user = seen[1]["body"]["messages"][1]["content"].as_str().unwrap();
    assert!(
        user.contains("## Best candidates") && user.contains("The best candidate so far"),
        "{user}"
    );
    assert!(user.contains("Triton's CPU interpreter"), "{user}");

    let proposals = proposals(&d.events(0));
    for p in &proposals {
        assert_eq!(p.agent, "llm");
        assert_eq!(p.note.as_deref(), Some("Smaller tiles first."));
    }
    let configs: Vec<serde_json::Value> = proposals.into_iter().map(|p| p.config).collect();
    assert_eq!(
        configs,
        vec![
            serde_json::json!({"BLOCK_M": 16}),
            serde_json::json!({"BLOCK_M": 64})
        ]
    );
}
