//! A fork bomb run by the model stays inside the tools worker's pids cgroup (`pids.max`), is
//! killed at its timeout, and leaves nothing behind; the worker keeps serving. Where the host has
//! no pids cgroup the test says so and checks nothing (the worker then runs unbounded, and
//! `doctor`/the logs say why).

mod common;

use hanzo_dev::tree::Supervisor;
use hanzo_ipc::roles::tools::{Request, Response, ToolCall};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_stays_within_the_tools_workers_process_budget() {
    let ws = tempfile::tempdir().expect("ws");
    let (cfg, _run) = common::tree_config(ws.path(), common::path_only());
    let sup = Supervisor::start(cfg).await.expect("start");
    let (_, info) = tokio::time::timeout(Duration::from_secs(30), sup.tools.ready())
        .await
        .expect("hang guard")
        .expect("tools ready");
    let Some(cg_dir) = info.pids_cgroup.clone() else {
        eprintln!("skipped: this host offers no pids cgroup");
        sup.shutdown().await;
        return;
    };
    let cg = |file: &str| std::fs::read_to_string(cg_dir.join(file)).unwrap_or_default();
    // The whole worker process tree joined the group before it forked.
    let in_group: Vec<u32> = cg("cgroup.procs")
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert!(
        in_group.contains(&info.pid),
        "{in_group:?} lacks {}",
        info.pid
    );
    assert_eq!(
        cg("pids.max").trim(),
        hanzo_policy::profile::TOOLS_MAX_PIDS.to_string()
    );

    let bomb = ToolCall {
        id: "t1".into(),
        name: "bash".into(),
        input: r#"{"command": "b() { b | b & }; b; sleep 30", "timeout_ms": 3000}"#.into(),
    };
    let r = tokio::time::timeout(Duration::from_secs(60), sup.tools.call(Request::Run(bomb)))
        .await
        .expect("hang guard")
        .expect("the call completes");
    match r {
        Response::Result(res) => assert!(res.is_error, "{res:?}"),
        other => panic!("unexpected {other:?}"),
    }
    // The limit was reached and held: the kernel refused forks past pids.max.
    let refused: u64 = cg("pids.events")
        .lines()
        .find_map(|l| l.strip_prefix("max "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(refused > 0, "pids.events: {}", cg("pids.events"));
    // Once the group kill has run, only the worker's own processes remain.
    let left = async {
        loop {
            let n = cg("cgroup.procs").lines().count();
            if n <= in_group.len() {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let n = tokio::time::timeout(Duration::from_secs(30), left)
        .await
        .expect("bomb processes outlived the timeout kill");
    assert!(n <= in_group.len());
    // And the worker still serves.
    let ok = ToolCall {
        id: "t2".into(),
        name: "bash".into(),
        input: r#"{"command": "echo alive"}"#.into(),
    };
    match sup.tools.call(Request::Run(ok)).await.expect("call") {
        Response::Result(res) => assert!(res.output.contains("alive"), "{res:?}"),
        other => panic!("unexpected {other:?}"),
    }
    sup.shutdown().await;
    assert!(!cg_dir.exists(), "the cgroup is removed with the worker");
}
