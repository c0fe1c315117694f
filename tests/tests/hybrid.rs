//! The `hybrid` agent on the demo task in CPU mode, with a scripted LLM on a local HTTP
//! server: the LLM writes a structure, the search tunes its SPACE for `tune_evaluations`,
//! the LLM is asked again with the tuned results in its context; the log shows both
//! phases and `kernelctl context` says which one is next.

use std::net::TcpListener;
use std::time::Duration;

use kerneld::wire::{EventKind, GoalState};
use kerneld_e2e::*;
use serde_json::{json, Value};

/// Answers each request with the next structure (the demo seed, marked `# structure N`
/// so each is a source of its own); returns the URL and, at the end, the requests' bodies.
fn scripted_llm(structures: usize) -> (String, std::thread::JoinHandle<Vec<Value>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seed = std::fs::read_to_string(repo_root().join("kernels/demo/seeds/tiled.py")).unwrap();
    let handle = std::thread::spawn(move || {
        let mut bodies = Vec::new();
        for n in 1..=structures {
            let (mut stream, _) = listener.accept().unwrap();
            bodies.push(read_http_request(&stream).body);
            let source = format!("{seed}\n# structure {n}\n");
            let reply = chat_reply(
                &format!("Structure {n}."),
                &source,
                &json!({"BLOCK_M": 16}),
                Some(100),
            );
            write_http(&mut stream, "200 OK", "", &reply);
        }
        bodies
    });
    (url, handle)
}

#[test]
fn the_hybrid_alternates_llm_structure_and_search_tuning() {
    let dir = TempDir::new("hybrid");
    let d = Daemon::start(dir.path());
    let (url, llm) = scripted_llm(2);
    let goal = dir.path().join("hybrid.toml");
    std::fs::write(
        &goal,
        format!(
            "name = \"hybrid\"\ntask = \"demo\"\n[budget]\niterations = 4\n\
             [agent]\nkind = \"hybrid\"\nproposer = \"llm\"\ntune_evaluations = 2\n\
             url = \"{url}\"\nmodel = \"test-model\"\n"
        ),
    )
    .unwrap();
    let id = enqueue(&d, &goal);
    let g = d.wait_terminal(&id, Duration::from_secs(240));
    assert_eq!(
        (g.state, g.reason.as_deref(), g.evaluations),
        (GoalState::Completed, Some("budget_iterations"), 4),
        "{g:?}\n{}",
        d.log_text()
    );

    // Structure, two tunings of it, the next structure.
    let proposals: Vec<(String, Option<String>, Option<String>)> = d
        .events(0)
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::CandidateProposed {
                agent,
                source,
                note,
                ..
            } => Some((agent, source, note)),
            _ => None,
        })
        .collect();
    let agents: Vec<&str> = proposals.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(
        agents,
        ["hybrid/llm", "hybrid/search", "hybrid/search", "hybrid/llm"],
        "{proposals:#?}"
    );
    let first = proposals[0].1.as_deref().expect("the structure's source");
    assert!(first.contains("# structure 1"));
    for tuned in &proposals[1..3] {
        assert_eq!(
            tuned.1.as_deref(),
            Some(first),
            "tuning keeps the structure"
        );
        assert!(
            tuned.2.as_deref().is_some_and(|n| n.starts_with("tune ")),
            "{tuned:?}"
        );
    }
    assert!(proposals[3].1.as_deref().unwrap().contains("# structure 2"));
    assert!(
        proposals[3]
            .2
            .as_deref()
            .is_some_and(|n| n.contains("tuned for 2 evaluations")),
        "{:?}",
        proposals[3].2
    );

    // The second request carried the tuned results (iterations 2 and 3) in its context.
    let bodies = llm.join().unwrap();
    assert_eq!(bodies.len(), 2);
    let second = bodies[1].to_string();
    assert!(
        second.contains("#2") || second.contains("iteration 2"),
        "the second request does not mention the tuned evaluations: {second}"
    );

    // The log, as people read it, shows both phases; `context` says the next one.
    let events = kernelctl(&d.socket, &["events", &id]);
    let events = String::from_utf8_lossy(&events.stdout).into_owned();
    assert!(
        events.contains("by hybrid/llm") && events.contains("by hybrid/search"),
        "{events}"
    );
    let ctx = kernelctl(&d.socket, &["context", &id]);
    let ctx = String::from_utf8_lossy(&ctx.stdout).into_owned();
    assert!(
        ctx.starts_with("phase: tune") && ctx.contains("iteration 4's structure"),
        "{ctx}"
    );
}
