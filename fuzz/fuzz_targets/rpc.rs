//! Fuzzes the control plane as a client reaches it: arbitrary bytes written to a real
//! connection (`rpc::connection` over a socket pair) go through the framing (line length,
//! `\r\n`, UTF-8, an unterminated last line), the JSON-RPC parsing and the dispatch to the
//! engine's operations, on a real redb log. The engine's scheduler does not run (no worker
//! is started); everything an RPC does up to that is exercised.
//!
//! A crash is a panic anywhere on that path; a hang is a connection that neither answers
//! nor closes within 10 s of its client hanging up.
//!
//! Seeds: fuzz/corpus/rpc (every method, good and bad parameters). Run: scripts/fuzz.sh.

#![no_main]

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;

use kerneld::tools::{self as rpc, Engine, Store};
use kerneld::{gpu, Config};

struct World {
    runtime: tokio::runtime::Runtime,
    engine: Arc<Engine>,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = std::env::temp_dir().join(format!("kerneld-fuzz-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut cfg = Config::new(dir.clone(), dir.join("sock"));
        cfg.kernels_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels");
        cfg.force_cpu = true;
        let store = Arc::new(Store::open(&cfg.db_path()).unwrap());
        let devices: Arc<dyn gpu::DeviceLayer> = Arc::new(gpu::CpuLayer::new("fuzzing"));
        let engine = runtime
            .block_on(Engine::start(cfg, store, devices, CancellationToken::new()))
            .unwrap();
        World { runtime, engine }
    })
}

fuzz_target!(|data: &[u8]| {
    let w = world();
    w.runtime.block_on(async {
        let (client, server) = UnixStream::pair().unwrap();
        let limits = rpc::Limits {
            partial_line: Duration::from_secs(2),
            ..rpc::Limits::default()
        };
        let served = tokio::spawn(rpc::connection(
            server,
            w.engine.clone(),
            CancellationToken::new(),
            limits,
        ));
        let (mut rd, mut wr) = client.into_split();
        // Read while writing: a reply the client does not read would block the daemon.
        let reader = tokio::spawn(async move {
            let mut sink = Vec::new();
            let _ = rd.read_to_end(&mut sink).await;
            sink.len()
        });
        let _ = wr.write_all(data).await;
        let _ = wr.shutdown().await;
        drop(wr);
        match tokio::time::timeout(Duration::from_secs(10), served).await {
            Ok(Ok(_)) => {}
            Ok(Err(join)) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            Ok(Err(_)) => {}
            Err(_) => panic!("hang: the connection neither answered nor closed within 10 s"),
        }
        let _ = reader.await;
    });
});
