//! `enqueue`: parse the goal file for this requester, then commit it (or, with `unique`, return the active goal of that name and owner).

use crate::engine::*;

/// Longest goal file path accepted (Linux's PATH_MAX).
const MAX_PATH_BYTES: usize = 4096;

impl Engine {
    /// What a goal file from `uid` may ask for (fork's settings are checked the same way).
    pub(super) fn requester(
        &self,
        uid: u32,
        files: std::collections::BTreeMap<String, String>,
    ) -> crate::goal::Requester {
        let trusted = self.is_trusted(uid);
        crate::goal::Requester {
            trusted,
            // A root daemon runs a command agent as the goal's owner (agent::command).
            may_run_commands: trusted || nix::unistd::geteuid().is_root(),
            files,
            llm_keys: self.config().llm_keys.clone(),
        }
    }

    /// A goal just committed (`evs`): into the engine's state, then published, then the
    /// scheduler woken. The commit lock is held until it is in the state.
    pub(super) fn adopt(
        &self,
        id: &str,
        evs: Vec<Event>,
        guard: tokio::sync::MutexGuard<'_, ()>,
    ) -> RpcResult<()> {
        {
            let mut st = self.state.lock().unwrap();
            let proj = self
                .store
                .goal(id)
                .map_err(internal)?
                .ok_or_else(|| internal("the new goal is missing from the store"))?;
            st.goals.insert(id.to_string(), GoalRt::new(proj));
        }
        drop(guard);
        for ev in evs {
            let _ = self.events.send(ev);
        }
        self.wake.notify_one();
        Ok(())
    }

    pub(crate) async fn enqueue(
        &self,
        params: EnqueueParams,
        uid: u32,
    ) -> RpcResult<EnqueueResult> {
        if self.stopping.is_cancelled() {
            return Err(rpc_err(
                code::SHUTTING_DOWN,
                "kerneld is stopping; enqueue again once it is back",
            ));
        }
        // The path only names the file in messages and resolves a relative task: no
        // file system takes a longer one, and every error would quote it.
        if params.path.len() > MAX_PATH_BYTES {
            return Err(rpc_err(
                code::INVALID_PARAMS,
                format!(
                    "enqueue: `path` is {} bytes; a path may be at most {MAX_PATH_BYTES}",
                    params.path.len()
                ),
            ));
        }
        let kernels = self.config().kernels_dir.clone();
        let requester = self.requester(uid, params.files);
        let sent_seeds = !requester.files.is_empty();
        let (path, source) = (params.path, params.source);
        let spec = tokio::task::spawn_blocking(move || {
            crate::goal::parse(&path, &source, &kernels, &requester)
        })
        .await
        .map_err(internal)?
        .map_err(|e| rpc_err(code::INVALID_GOAL, e.to_string()))?;
        let spec = self.chain_at_enqueue(spec, params.after, uid)?; // issue #29
        self.sandbox()
            .await
            .admit(spec.agent.kind().as_str(), sent_seeds)
            .map_err(|e| rpc_err(code::PERMISSION_DENIED, e))?;
        let guard = self.commit_lock.lock().await;
        {
            let st = self.state.lock().unwrap();
            if params.unique {
                if let Some(g) = st.goals.values().find(|g| {
                    g.proj.spec.name == spec.name
                        && g.proj.owner_uid == uid
                        && !g.proj.state.is_terminal()
                }) {
                    return Ok(EnqueueResult {
                        id: g.proj.id.clone(),
                        name: spec.name,
                        created: false,
                    });
                }
            }
            self.admit_goal(&st, uid)?;
        }
        let name = spec.name.clone();
        let store = self.store.clone();
        let (id, evs) = tokio::task::spawn_blocking(move || store.enqueue_goal(spec, uid))
            .await
            .map_err(internal)?
            .map_err(internal)?;
        self.adopt(&id, evs, guard)?;
        Ok(EnqueueResult {
            id,
            name,
            created: true,
        })
    }
}
