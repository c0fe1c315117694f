//! The worker protocol's golden files (`protocol/golden/worker/*.json`, real lines of
//! `kernels/harness/worker.py` in CPU mode, paths made neutral): every one is read by
//! its Rust type and written back unchanged, and replies keep reading when the worker
//! adds fields. The harness's Python tests check the same files from its side.

use std::path::{Path, PathBuf};

use kerneld_protocol::wire::{ResultClass, TimingMethod};
use kerneld_protocol::worker::*;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

fn golden(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("golden/worker")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Read as `T`, written back: the same JSON (every field the golden file has is one
/// the type knows, and none is added).
fn round_trip<T: Serialize + DeserializeOwned>(name: &str) -> T {
    let v = golden(name);
    let t: T = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let back = serde_json::to_value(&t).unwrap();
    assert_eq!(back, v, "{name} does not round-trip");
    t
}

/// A request as the transport sends it: the typed request plus its `id`.
fn request_round_trip(name: &str) -> Request {
    let mut v = golden(name);
    let id = v.as_object_mut().unwrap().remove("id");
    assert!(id.as_ref().is_some_and(Value::is_u64), "{name}: no id");
    let r: Request = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        serde_json::to_value(&r).unwrap(),
        v,
        "{name} does not round-trip"
    );
    r
}

/// Replies read on when the worker adds fields, at the top and inside the result.
fn tolerant<T: DeserializeOwned>(name: &str) {
    let mut v = golden(name);
    v["added_later"] = json!({"any": 1});
    if let Some(r) = v.get_mut("result").and_then(Value::as_object_mut) {
        r.insert("added_later".into(), json!(true));
    }
    serde_json::from_value::<T>(v).unwrap_or_else(|e| panic!("{name} with extra fields: {e}"));
}

#[test]
fn every_golden_file_is_checked() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden/worker");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "describe.rejected.reply.json",
            "describe.reply.json",
            "describe.request.json",
            "evaluate.aborted.reply.json",
            "evaluate.failed.reply.json",
            "evaluate.gpu.reply.json",
            "evaluate.refused.reply.json",
            "evaluate.reply.json",
            "evaluate.request.json",
            "prepare.rejected.reply.json",
            "prepare.reply.json",
            "prepare.request.json",
            "ready.json",
            "shutdown.reply.json",
            "shutdown.request.json",
        ],
        "a golden file without a test here (add one), or a test without its file"
    );
}

#[test]
fn ready_line() {
    let r: Ready = round_trip("ready.json");
    assert!(r.is_ready());
    assert_eq!(r.mode, "cpu");
    assert!(r.device.is_null());
    tolerant::<Ready>("ready.json");
}

#[test]
fn describe() {
    let Request::Describe(d) = request_round_trip("describe.request.json") else {
        panic!("not a describe request");
    };
    assert!(d.task_dir.ends_with("/demo"));

    let ok: Reply<Described> = round_trip("describe.reply.json");
    let body = ok.into_body().unwrap();
    assert_eq!(body.rejection(), None);
    assert!(body.space["BLOCK_M"].is_array() && body.default["BLOCK_M"].is_u64());

    let rejected: Reply<Described> = round_trip("describe.rejected.reply.json");
    let body = rejected.into_body().unwrap();
    assert_eq!(body.class, Some(ResultClass::Rejected));
    assert!(body.rejection().unwrap().contains("[concurrency]"));
    tolerant::<Reply<Described>>("describe.reply.json");
}

#[test]
fn evaluate() {
    let Request::Evaluate(e) = request_round_trip("evaluate.request.json") else {
        panic!("not an evaluate request");
    };
    // The daemon sends the goal's timing method only: the harness's DEFAULT_TIMING
    // applies to everything else.
    assert_eq!(
        e.timing,
        Timing {
            mode: Some(TimingMethod::Gpu),
            ..Timing::default()
        }
    );
    assert_eq!(
        golden("evaluate.request.json")["timing"],
        json!({"mode": "gpu"})
    );

    let ok: Reply<Evaluated> = serde_json::from_value(golden("evaluate.reply.json")).unwrap();
    let result = ok.into_body().unwrap().result.expect("a result");
    assert_eq!(result.class, ResultClass::Ok);
    assert!(result.correct && result.interpreted && result.speedup.is_some());
    assert!(!result.shapes.is_empty() && result.config.is_some());
    // The judge names the method (CPU mode: the interpreter's figures), per shape too.
    assert_eq!(result.timing.as_deref(), Some("interpreted"));
    assert_eq!(result.timing_label(), "interpreted");
    assert_eq!(result.shapes[0].timing.as_deref(), Some("interpreted"));
    assert!(result.shapes[0].baseline_ci_pct.is_some());
    tolerant::<Reply<Evaluated>>("evaluate.reply.json");

    // A failed result is still an `ok` reply.
    let failed: Reply<Evaluated> = round_trip("evaluate.failed.reply.json");
    let result = failed.into_body().unwrap().result.unwrap();
    assert_eq!(result.class, ResultClass::WrongResult);
    assert!(!result.is_scored());
    assert!(result.message.unwrap().contains("NaN"));

    let refused: Reply<Evaluated> = round_trip("evaluate.refused.reply.json");
    assert!(refused.into_body().unwrap_err().contains("no task.toml"));
    let aborted: Reply<Evaluated> = round_trip("evaluate.aborted.reply.json");
    assert!(aborted.aborted && !aborted.ok);
}

/// A GPU judge's result (issue #23): what each figure is, both figures where it measured
/// both, the baseline's interval, and why a shape was timed otherwise than asked.
#[test]
fn evaluate_on_a_gpu_says_which_figure_each_number_is() {
    let ok: Reply<Evaluated> = serde_json::from_value(golden("evaluate.gpu.reply.json")).unwrap();
    let r = ok.into_body().unwrap().result.expect("a result");
    assert!(r.is_scored() && !r.interpreted);
    assert_eq!(r.timing.as_deref(), Some("gpu"));
    assert_eq!(r.timing_label(), "GPU time");
    let (graph, eager) = (&r.shapes[0], &r.shapes[1]);
    assert_eq!(graph.timing_label(false), "GPU time");
    assert_eq!(
        (graph.gpu_us, graph.as_called_us),
        (Some(graph.median_us), Some(214.95))
    );
    assert_eq!(graph.baseline_ci_pct, Some(0.09));
    assert_eq!(eager.timing_label(false), "as called");
    assert_eq!(eager.gpu_us, None);
    assert!(eager
        .timing_note
        .as_deref()
        .unwrap()
        .contains("cannot be captured in a CUDA graph"));
    // Every new field is optional: written back without them when absent.
    let back = serde_json::to_value(&r.shapes[1]).unwrap();
    assert!(back.get("gpu_us").is_none() && back.get("timing").is_some());
    tolerant::<Reply<Evaluated>>("evaluate.gpu.reply.json");
}

#[test]
fn prepare() {
    let Request::Prepare(p) = request_round_trip("prepare.request.json") else {
        panic!("not a prepare request");
    };
    assert!(p.task_dir.ends_with("/demo") && p.config["BLOCK_M"] == 32);
    let ok: Reply<Prepared> = round_trip("prepare.reply.json");
    assert!(ok.into_body().unwrap().accepted);
    let no: Reply<Prepared> = round_trip("prepare.rejected.reply.json");
    let body = no.into_body().unwrap();
    assert!(!body.accepted && body.message.unwrap().contains("static checks"));
    tolerant::<Reply<Prepared>>("prepare.reply.json");
}

#[test]
fn timing_overrides_carry_only_what_is_set() {
    let t = Timing {
        max_reps: Some(50),
        ..Timing::default()
    };
    assert_eq!(serde_json::to_value(&t).unwrap(), json!({"max_reps": 50}));
    let t = Timing {
        mode: Some(TimingMethod::AsCalled),
        ..Timing::default()
    };
    assert_eq!(
        serde_json::to_value(&t).unwrap(),
        json!({"mode": "as_called"})
    );
}

#[test]
fn shutdown() {
    assert_eq!(
        request_round_trip("shutdown.request.json"),
        Request::Shutdown {}
    );
    let r: Reply<Empty> = round_trip("shutdown.reply.json");
    assert!(r.ok);
}
