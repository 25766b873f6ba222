//! Keeps the harness working: a tiny configuration of every benchmark on every target that
//! can be set up here. Asserts only that every row produced a positive number for every
//! target that ran; no timing is checked.

use engram_bench::{BenchOptions, Scale, run_with};

#[test]
fn every_benchmark_produces_a_positive_number() {
    let dir = std::env::temp_dir().join(format!("engram-bench-test-{}", std::process::id()));
    let opts = BenchOptions {
        json: Some(dir.join("bench.json")),
        charts: Some(dir.join("charts")),
        threads: vec![1, 2],
        ..BenchOptions::default()
    };
    let report = run_with(&opts, Scale::tiny(), Vec::new()).expect("the harness runs");
    let ran: Vec<&str> = report
        .targets
        .iter()
        .filter(|t| t.skipped.is_none())
        .map(|t| t.name.as_str())
        .collect();
    assert!(ran.contains(&"engram") && ran.contains(&"engram-daemon") && ran.contains(&"tmpfs"));
    assert!(!report.rows.is_empty());
    for row in &report.rows {
        assert!(!row.values.is_empty(), "{} measured nothing", row.bench);
        for (col, v) in &row.values {
            match v {
                Ok(x) => assert!(*x > 0.0, "{} on {col}: {x}", row.bench),
                Err(e) => panic!("{} ({} thr) on {col}: {e}", row.bench, row.threads),
            }
        }
        if row.group != engram_bench::Group::Recovery {
            for t in &ran {
                assert!(
                    row.get(t).is_some(),
                    "{} was not measured on {t}",
                    row.bench
                );
            }
        }
    }
    assert_eq!(report.goals.len(), 19);
    let json = std::fs::read_to_string(dir.join("bench.json")).expect("JSON written");
    assert!(json.starts_with('{') && json.trim_end().ends_with('}'));
    let png = std::fs::read(dir.join("charts/micro.png")).expect("chart written");
    assert!(png.starts_with(b"\x89PNG"));
    let _ = std::fs::remove_dir_all(&dir);
}
