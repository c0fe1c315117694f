use super::*;

fn task_fixture() -> tempfile_dir::Dir {
    tempfile_dir::Dir::new()
}

/// A tiny self-cleaning temp dir holding a task, without a dev-dependency.
mod tempfile_dir {
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new() -> Dir {
            let p = std::env::temp_dir().join(format!(
                "kerneld-goal-test-{}-{}",
                std::process::id(),
                rand::random::<u64>()
            ));
            std::fs::create_dir_all(p.join("demo/seeds")).unwrap();
            std::fs::write(
                    p.join("demo/task.toml"),
                    "name = \"demo\"\nentry = \"matmul\"\ndefault_shapes = [\"m64\"]\nseeds = [\"seeds/tiled.py\"]\n\
                     [baselines]\nreference = \"reference\"\n[shapes.m64]\nM = 64\n[shapes.m128]\nM = 128\n",
                )
                .unwrap();
            std::fs::write(p.join("demo/seeds/tiled.py"), "SPACE = {}\n").unwrap();
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn parse_in(dir: &tempfile_dir::Dir, text: &str) -> Result<GoalSpec, GoalError> {
    let path = dir.0.join("goal.toml");
    parse(
        &path.display().to_string(),
        text,
        &dir.0,
        &Requester::trusted(local_seed_files(&path, text).unwrap()),
    )
}

#[test]
fn durations() {
    assert_eq!(parse_duration("10h"), Ok(36_000));
    assert_eq!(parse_duration("1h30m"), Ok(5_400));
    assert_eq!(parse_duration("2d"), Ok(172_800));
    assert!(parse_duration("10").is_err());
    assert!(parse_duration("10x").is_err());
    assert!(parse_duration("h").is_err());
    assert!(parse_duration("0s").is_err());
}

#[test]
fn minimal_goal_takes_task_defaults() {
    let d = task_fixture();
    let g = parse_in(&d, "name = \"g\"\ntask = \"demo\"\n").unwrap();
    assert_eq!(g.shapes, vec!["m64"]);
    assert_eq!(g.baseline, "reference");
    assert_eq!(g.seeds.len(), 1);
    assert_eq!(g.agent.kind(), "search");
    assert_eq!(g.resources.gpus, 1);
    // The objective is the GPU time unless the goal says otherwise, and the goal says so.
    assert_eq!(g.timing, Some(TimingMethod::Gpu));
}

#[test]
fn timing_is_gpu_or_as_called_and_anything_else_names_its_place() {
    let d = task_fixture();
    let g = parse_in(
        &d,
        "name = \"g\"\ntask = \"demo\"\ntiming = \"as_called\"\n",
    )
    .unwrap();
    assert_eq!(g.timing, Some(TimingMethod::AsCalled));
    let g = parse_in(&d, "name = \"g\"\ntask = \"demo\"\ntiming = \"gpu\"\n").unwrap();
    assert_eq!(g.timing, Some(TimingMethod::Gpu));
    let e = parse_in(&d, "name = \"g\"\ntask = \"demo\"\ntiming = \"wall\"\n").unwrap_err();
    assert_eq!((e.line, e.column), (3, 10), "{e}");
    assert!(
        e.message.contains("unknown timing `wall`")
            && e.message.contains("gpu")
            && e.message.contains("as_called"),
        "{e}"
    );
    let e = parse_in(&d, "name = \"g\"\ntask = \"demo\"\ntiming = 1\n").unwrap_err();
    assert_eq!(e.line, 3, "{e}");
    assert!(e.message.contains("timing"), "{e}");
}

#[test]
fn unknown_key_names_line() {
    let d = task_fixture();
    let e = parse_in(
        &d,
        "name = \"g\"\ntask = \"demo\"\n[budget]\nwal = \"1h\"\n",
    )
    .unwrap_err();
    assert_eq!(e.line, 4, "{e}");
    assert!(e.message.contains("wal"), "{e}");
}

#[test]
fn bad_duration_names_line_and_form() {
    let d = task_fixture();
    let e = parse_in(
        &d,
        "name = \"g\"\ntask = \"demo\"\n[budget]\nwall = \"10 hours\"\n",
    )
    .unwrap_err();
    assert_eq!(e.line, 4, "{e}");
    assert!(e.message.contains("10h"), "{e}");
}

#[test]
fn missing_task_is_explained() {
    let d = task_fixture();
    let e = parse_in(&d, "name = \"g\"\ntask = \"nope\"\n").unwrap_err();
    assert_eq!(e.line, 2);
    assert!(e.message.contains("task `nope` not found"), "{e}");
}

#[test]
fn syntax_error_has_position() {
    let d = task_fixture();
    let e = parse_in(&d, "name = \"g\"\ntask = \n").unwrap_err();
    assert_eq!(e.line, 2, "{e}");
}

#[test]
fn unknown_shape_and_baseline_list_choices() {
    let d = task_fixture();
    let e = parse_in(&d, "name = \"g\"\ntask = \"demo\"\nshapes = [\"m999\"]\n").unwrap_err();
    assert!(
        e.message.contains("m64") && e.message.contains("m128"),
        "{e}"
    );
    let e = parse_in(&d, "name = \"g\"\ntask = \"demo\"\nbaseline = \"cublas\"\n").unwrap_err();
    assert!(e.message.contains("reference"), "{e}");
}

#[test]
fn agent_settings_are_checked_at_enqueue() {
    let d = task_fixture();
    let e = parse_in(
        &d,
        "name = \"g\"\ntask = \"demo\"\n[agent]\nkind = \"llm\"\n",
    )
    .unwrap_err();
    assert_eq!(e.line, 4, "{e}");
    assert!(e.message.contains("needs `url`"), "{e}");
    let e = parse_in(
        &d,
        "name = \"g\"\ntask = \"demo\"\n[agent]\nkind = \"command\"\n",
    )
    .unwrap_err();
    assert!(e.message.contains("needs `command`"), "{e}");
    let e = parse_in(
        &d,
        "name = \"g\"\ntask = \"demo\"\n[agent]\nkind = \"magic\"\n",
    )
    .unwrap_err();
    assert!(e.message.contains("search, llm, command"), "{e}");
    let g = parse_in(&d, "name = \"g\"\ntask = \"demo\"\n[agent]\nkind = \"llm\"\nurl = \"http://127.0.0.1:8000/v1\"\nmodel = \"m\"\n").unwrap();
    assert_eq!(g.agent.settings()["api_key_env"], "OPENAI_API_KEY");
}

fn parse_as(
    dir: &tempfile_dir::Dir,
    text: &str,
    requester: &Requester,
) -> Result<GoalSpec, GoalError> {
    let path = dir.0.join("goal.toml");
    parse(&path.display().to_string(), text, &dir.0, requester)
}

fn untrusted(files: &[(&str, &str)]) -> Requester {
    Requester {
        trusted: false,
        may_run_commands: false,
        files: files
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        llm_keys: BTreeMap::new(),
    }
}

#[test]
fn seeds_outside_the_task_come_only_from_the_client() {
    let d = task_fixture();
    // An absolute path is never read by the daemon, whoever asks.
    for who in [untrusted(&[]), Requester::trusted(Default::default())] {
        let e = parse_as(
            &d,
            "name = \"g\"\ntask = \"demo\"\nseed = \"/etc/hostname\"\n",
            &who,
        )
        .unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        assert!(
            e.message.contains("not in the task's directory")
                && e.message.contains("kernelctl sent no readable file"),
            "{e}"
        );
    }
    // Nor a relative path leaving the task directory.
    std::fs::write(d.0.join("outside.py"), "SPACE = {}\n").unwrap();
    let e = parse_as(
        &d,
        "name = \"g\"\ntask = \"demo\"\nseed = \"../outside.py\"\n",
        &untrusted(&[]),
    )
    .unwrap_err();
    assert!(e.message.contains("not found"), "{e}");
    // What the client sent is used, under the seed's file name.
    let g = parse_as(
        &d,
        "name = \"g\"\ntask = \"demo\"\nseed = [\"mine.py\", \"tiled.py\"]\n",
        &untrusted(&[("mine.py", "SPACE = {'A': [1]}\n")]),
    )
    .unwrap();
    assert_eq!(g.seeds[0].name, "mine.py");
    assert_eq!(g.seeds[0].source, "SPACE = {'A': [1]}\n");
    assert_eq!(g.seeds[1].name, "tiled.py");
}

#[test]
fn client_reads_seeds_next_to_the_goal_file() {
    let d = task_fixture();
    std::fs::write(d.0.join("mine.py"), "SPACE = {}\n").unwrap();
    let text = "name = \"g\"\ntask = \"demo\"\nseed = [\"mine.py\", \"tiled.py\"]\n";
    assert_eq!(seed_refs(text), vec!["mine.py", "tiled.py"]);
    assert_eq!(seed_refs("seed = \"a.py\"\n"), vec!["a.py"]);
    assert!(seed_refs("name = \"g\"\n").is_empty());
    let files = local_seed_files(&d.0.join("goal.toml"), text).unwrap();
    assert_eq!(files.keys().collect::<Vec<_>>(), vec!["mine.py"]);
}

#[test]
fn task_paths_only_from_trusted_requesters() {
    let d = task_fixture();
    let abs = format!("name = \"g\"\ntask = \"{}\"\n", d.0.join("demo").display());
    let e = parse_as(&d, &abs, &untrusted(&[])).unwrap_err();
    assert_eq!(e.line, 2, "{e}");
    assert!(
        e.message.contains("refused")
            && e.message.contains("kernels directory")
            && e.message.contains("installed task (demo)"),
        "{e}"
    );
    let e = parse_as(&d, "name = \"g\"\ntask = \"../x/demo\"\n", &untrusted(&[])).unwrap_err();
    assert!(e.message.contains("refused"), "{e}");
    assert!(parse_as(&d, &abs, &Requester::trusted(Default::default())).is_ok());
    // An installed task by name is fine for anyone.
    assert!(parse_as(&d, "name = \"g\"\ntask = \"demo\"\n", &untrusted(&[])).is_ok());
}

#[test]
fn command_agent_needs_permission() {
    let d = task_fixture();
    let text = "name = \"g\"\ntask = \"demo\"\n[agent]\nkind = \"command\"\ncommand = [\"true\"]\n";
    let e = parse_as(&d, text, &untrusted(&[])).unwrap_err();
    assert!(e.message.contains("agent kind `command` refused"), "{e}");
    let root_daemon = Requester {
        may_run_commands: true,
        ..untrusted(&[])
    };
    assert!(parse_as(&d, text, &root_daemon).is_ok());
}

#[test]
fn untrusted_llm_goals_send_only_keys_the_admin_shares_and_only_where_pinned() {
    let d = task_fixture();
    let goal = |url: &str, key: &str| {
        format!(
            "name = \"g\"\ntask = \"demo\"\n[agent]\nkind = \"llm\"\nurl = \"{url}\"\n\
                 model = \"m\"\n{key}"
        )
    };
    let key_of = |spec: GoalSpec| {
        spec.agent.settings()["api_key_env"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let mut who = untrusted(&[]);
    // No sharing configured: a named key is refused, an unnamed one becomes no key.
    let e = parse_as(
        &d,
        &goal("https://evil.example/v1", "api_key_env = \"AWS_SECRET\""),
        &who,
    )
    .unwrap_err();
    assert!(e.message.contains("llm_keys"), "{e}");
    let spec = parse_as(&d, &goal("https://evil.example/v1", ""), &who).unwrap();
    assert_eq!(key_of(spec), "");
    // Shared and pinned: only to its endpoint.
    who.llm_keys
        .insert("OPENAI_API_KEY".into(), "https://api.openai.com/".into());
    let spec = parse_as(&d, &goal("https://api.openai.com/v1", ""), &who).unwrap();
    assert_eq!(key_of(spec), "OPENAI_API_KEY");
    let e = parse_as(
        &d,
        &goal(
            "https://evil.example/v1",
            "api_key_env = \"OPENAI_API_KEY\"",
        ),
        &who,
    )
    .unwrap_err();
    assert!(
        e.message
            .contains("may only be sent to URLs under https://api.openai.com/"),
        "{e}"
    );
    // Trusted requesters name any key.
    let spec = parse_in(
        &d,
        &goal("https://evil.example/v1", "api_key_env = \"AWS_SECRET\""),
    )
    .unwrap();
    assert_eq!(key_of(spec), "AWS_SECRET");
}

#[test]
fn names_that_look_like_ids_are_refused() {
    let d = task_fixture();
    for name in ["g1", "g0042", ".", ".."] {
        let e = parse_in(&d, &format!("name = \"{name}\"\ntask = \"demo\"\n")).unwrap_err();
        assert_eq!(e.line, 1, "{e}");
        assert!(e.message.contains("cannot be"), "{e}");
    }
    assert!(e_ok(&d, "g"));
    assert!(e_ok(&d, "g1x"));
    assert!(e_ok(&d, "goal1"));
}

fn e_ok(d: &tempfile_dir::Dir, name: &str) -> bool {
    parse_in(d, &format!("name = \"{name}\"\ntask = \"demo\"\n")).is_ok()
}

#[test]
fn agent_keys_and_values_are_checked() {
    let d = task_fixture();
    let agent = |body: &str| {
        parse_in(
            &d,
            &format!("name = \"g\"\ntask = \"demo\"\n[agent]\n{body}\n"),
        )
    };
    let e = agent("kind = \"search\"\nurl = \"http://x\"\ncommand = [\"a\"]").unwrap_err();
    assert_eq!(e.line, 5, "{e}");
    assert!(
        e.message
            .contains("`agent.url` does not apply to agent kind `search`")
            && e.message.contains("kind, context_bytes"),
        "{e}"
    );
    let e = agent("kind = \"command\"\ncommand = [\"a\"]\nmodel = \"m\"").unwrap_err();
    assert!(e.message.contains("`agent.model` does not apply"), "{e}");
    let llm = "kind = \"llm\"\nmodel = \"m\"\n";
    for bad in [
        "not a url",
        "ftp://h/v1",
        "http://",
        "http://h:99999/v1",
        "http://u:p@h/",
    ] {
        let e = agent(&format!("{llm}url = \"{bad}\"")).unwrap_err();
        assert_eq!(e.line, 6, "{bad}: {e}");
        assert!(e.message.contains("not a usable URL"), "{bad}: {e}");
    }
    for good in [
        "http://127.0.0.1:8000/v1",
        "https://api.example.com/v1/chat/completions",
        "http://[::1]:8080",
    ] {
        agent(&format!("{llm}url = \"{good}\"")).unwrap_or_else(|e| panic!("{good}: {e}"));
    }
    let e = agent("kind = \"llm\"\nurl = \"http://h/v1\"").unwrap_err();
    assert!(e.message.contains("needs `model`"), "{e}");
    let e = agent(&format!("{llm}url = \"http://h\"\ntemperature = -5.0")).unwrap_err();
    assert!(e.message.contains("between 0 and 2"), "{e}");
    let e = agent("kind = \"search\"\ncontext_bytes = 999999999999").unwrap_err();
    assert!(
        e.message
            .contains("between 1024 (1 KiB) and 1048576 (1 MiB)"),
        "{e}"
    );
    assert!(agent("kind = \"search\"\ncontext_bytes = 16384").is_ok());
}

#[test]
fn duplicate_shapes_are_refused() {
    let d = task_fixture();
    let e = parse_in(
        &d,
        "name = \"g\"\ntask = \"demo\"\nshapes = [\"m64\", \"m64\"]\n",
    )
    .unwrap_err();
    assert!(e.message.contains("`m64` is listed twice"), "{e}");
}

#[test]
fn type_errors_are_in_plain_words() {
    let d = task_fixture();
    let e = parse_in(
        &d,
        "name = \"g\"\ntask = \"demo\"\n[budget]\niterations = \"1000\"\n",
    )
    .unwrap_err();
    assert_eq!((e.line, e.column), (4, 14), "{e}");
    assert_eq!(
        e.message,
        "`budget.iterations` must be an integer, not a string: write iterations = 1000"
    );
    let e = parse_in(&d, "name = \"g\"\ntask = \"demo\"\nseed = 5\n").unwrap_err();
    assert_eq!(e.line, 3, "{e}");
    assert!(
        e.message
            .starts_with("`seed` must be a file name or a list of file names"),
        "{e}"
    );
    let e = parse_in(&d, "name = 7\ntask = \"demo\"\n").unwrap_err();
    assert!(
        e.message
            .contains("`name` must be a string (in quotes), not an integer: write name = \"7\""),
        "{e}"
    );
    let e = parse_in(
        &d,
        "name = \"g\"\ntask = \"demo\"\n[budget]\nwall = \"99999999999999999999h\"\n",
    )
    .unwrap_err();
    assert_eq!(e.line, 4, "{e}");
    assert!(e.message.contains("duration too long"), "{e}");
    assert!(parse_duration("3651d").unwrap_err().contains("too long"));
    assert_eq!(parse_duration("3650d"), Ok(MAX_DURATION_S));
}

#[test]
fn token_and_cost_budgets() {
    let d = task_fixture();
    let g = parse_in(
        &d,
        "name = \"g\"\ntask = \"demo\"\n[budget]\ntokens = 50000\ncost = 2.5\nprice_per_1k_tokens = 0.01\n",
    )
    .unwrap();
    assert_eq!(
        (g.budget.tokens, g.budget.cost, g.budget.price_per_1k_tokens),
        (Some(50000), Some(2.5), Some(0.01))
    );
    let e = parse_in(&d, "name = \"g\"\ntask = \"demo\"\n[budget]\ncost = 2.5\n").unwrap_err();
    assert!(e.to_string().contains("price_per_1k_tokens"), "{e}");
    let e = parse_in(&d, "name = \"g\"\ntask = \"demo\"\n[budget]\ntokens = 0\n").unwrap_err();
    assert!(
        e.to_string()
            .contains("`budget.tokens` must be between 1 and 1000000000000"),
        "{e}"
    );
    for (budget, field) in [
        ("tokens = 1000000000001", "budget.tokens"),
        ("cost = 1e308\nprice_per_1k_tokens = 0.01", "budget.cost"),
        (
            "cost = 1.0\nprice_per_1k_tokens = 1e308",
            "budget.price_per_1k_tokens",
        ),
        ("cost = -1.0\nprice_per_1k_tokens = 0.01", "budget.cost"),
    ] {
        let text = format!("name = \"g\"\ntask = \"demo\"\n[budget]\n{budget}\n");
        let e = parse_in(&d, &text).unwrap_err().to_string();
        assert!(e.contains(field) && e.contains("between"), "{budget}: {e}");
    }
}

#[test]
fn hybrid_agent_takes_a_proposer_and_its_keys() {
    let d = task_fixture();
    let head = "name = \"g\"\ntask = \"demo\"\n[agent]\nkind = \"hybrid\"\n";
    let g = parse_in(
        &d,
        &format!("{head}proposer = \"llm\"\ntune_evaluations = 3\nurl = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n"),
    )
    .unwrap();
    let crate::wire::AgentSpec::Hybrid(h) = &g.agent else {
        panic!("{:?}", g.agent)
    };
    assert_eq!(h.tune_evaluations, 3);
    assert_eq!(h.proposer.kind(), "llm");
    assert_eq!(g.agent.proposer().kind(), "llm");

    let no_proposer = parse_in(&d, head).unwrap_err().to_string();
    assert!(no_proposer.contains("needs `proposer`"), "{no_proposer}");
    let search = parse_in(&d, &format!("{head}proposer = \"search\"\n"))
        .unwrap_err()
        .to_string();
    assert!(
        search.contains("must be \"llm\" or \"command\""),
        "{search}"
    );
    let zero = parse_in(
        &d,
        &format!("{head}proposer = \"llm\"\ntune_evaluations = 0\nurl = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n"),
    )
    .unwrap_err()
    .to_string();
    assert!(zero.contains("between 1 and"), "{zero}");
    let stray = parse_in(
        &d,
        "name = \"g\"\ntask = \"demo\"\n[agent]\nkind = \"search\"\ntune_evaluations = 2\n",
    )
    .unwrap_err()
    .to_string();
    assert!(stray.contains("does not apply"), "{stray}");
}
