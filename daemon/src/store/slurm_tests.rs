//! Unit tests of the Slurm jobs table.
use super::*;

#[test]
fn held_slurm_jobs_follow_the_log_across_a_reopen() {
    let path = std::env::temp_dir().join(format!(
        "kerneld-store-slurm-{}-{}.redb",
        std::process::id(),
        rand::random::<u64>()
    ));
    {
        let s = Store::open(&path).unwrap();
        let slot = || "slurm-0".to_string();
        s.append(vec![
            NewEvent::daemon(EventKind::SlurmJobSubmitted {
                slot: slot(),
                job: 7,
                name: "kerneld-x-0".into(),
                partition: "p".into(),
            }),
            NewEvent::daemon(EventKind::SlurmJobSubmitted {
                slot: "slurm-1".into(),
                job: 8,
                name: "kerneld-x-1".into(),
                partition: "p".into(),
            }),
            NewEvent::daemon(EventKind::SlurmJobStarted {
                slot: slot(),
                job: 7,
                node: "n1".into(),
                reattached: false,
            }),
            NewEvent::daemon(EventKind::SlurmJobEnded {
                slot: "slurm-1".into(),
                job: 8,
                state: Some("TIMEOUT".into()),
                reason: "time limit".into(),
            }),
        ])
        .unwrap();
    }
    let s = Store::open(&path).unwrap();
    let jobs = s.slurm_jobs().unwrap();
    assert_eq!(
        jobs,
        vec![SlurmJobRecord {
            slot: "slurm-0".into(),
            job: 7,
            name: "kerneld-x-0".into(),
            node: Some("n1".into())
        }]
    );
    drop(s);
    owner::remove_log(&path);
}
