use engram_crashtest::{Config, run};

#[test]
fn quick_mode_finds_no_failure() {
    let cfg = Config {
        quick: true,
        seed: 1,
        workload: std::env::var("CRASH_WORKLOAD").ok(),
        threads: 2,
    };
    let out = run(&cfg, &mut |_, _, _| {});
    for f in out.failures.iter().take(20) {
        eprintln!("FAIL {} at {}: {}", f.workload, f.crash_point, f.detail);
    }
    for u in out.unflushed.iter().take(20) {
        eprintln!("UNFLUSHED {u}");
    }
    eprintln!(
        "checkpoints: {}, log wraps: {}",
        out.checkpoints, out.log_wraps
    );
    if cfg.workload.is_none() {
        assert!(
            out.checkpoints > 0 && out.log_wraps > 0,
            "the workloads must cover checkpoints and wrap-around"
        );
    }
    eprintln!(
        "crash states checked: {}, failures: {}",
        out.states,
        out.failures.len()
    );
    assert!(
        out.ok(),
        "{} failures, {} unflushed stores",
        out.failures.len(),
        out.unflushed.len()
    );
}
