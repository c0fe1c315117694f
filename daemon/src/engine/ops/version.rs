//! `version`: the daemon's version, protocol, mode and last sequence number.

use crate::engine::*;

impl Engine {
    pub(crate) async fn version(&self) -> RpcResult<VersionResult> {
        let sandbox = self.sandbox().await.status();
        Ok(VersionResult {
            version: env!("CARGO_PKG_VERSION").into(),
            protocol: PROTOCOL,
            pid: std::process::id(),
            mode: self.devices.mode().into(),
            state_dir: self.config().state_dir.display().to_string(),
            last_seq: self.store.last_seq().map_err(internal)?,
            sandbox: Some(sandbox),
        })
    }
}
