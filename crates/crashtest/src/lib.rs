//! The crash-state harness: runs workloads with the persistence layer recording every flush
//! and fence, builds every crash image a real machine could leave behind, recovers each
//! one and checks it against an oracle (see docs/crash-consistency.md).

mod explore;
pub mod tree;
pub mod workload;

use workload::{Op, Rng};

#[derive(Clone, Debug)]
pub struct Config {
    /// Fewer subsets, pairs and random sequences: the test-suite mode.
    pub quick: bool,
    pub seed: u64,
    /// Run only workloads whose name contains this.
    pub workload: Option<String>,
    /// Worker threads.
    pub threads: usize,
}

#[derive(Clone, Debug)]
pub struct Failure {
    pub workload: String,
    pub crash_point: String,
    pub detail: String,
}

#[derive(Debug, Default)]
pub struct Outcome {
    pub states: u64,
    pub workloads: u64,
    pub failures: Vec<Failure>,
    pub unflushed: Vec<String>,
    /// Log checkpoints and wrap-arounds that happened during the recorded workloads.
    pub checkpoints: u64,
    pub log_wraps: u64,
}

impl Outcome {
    fn merge(&mut self, o: Outcome) {
        self.states += o.states;
        self.workloads += 1;
        self.failures.extend(o.failures);
        self.unflushed.extend(o.unflushed);
        self.checkpoints += o.checkpoints;
        self.log_wraps += o.log_wraps;
    }

    pub fn ok(&self) -> bool {
        self.failures.is_empty() && self.unflushed.is_empty()
    }
}

/// Every workload of the configuration, named.
pub fn workloads(cfg: &Config) -> Vec<(String, bool, Vec<Op>)> {
    let singles = workload::singles();
    let mut out: Vec<(String, bool, Vec<Op>)> = Vec::new();
    for (n, op) in &singles {
        out.push((format!("single/{n}"), true, vec![op.clone()]));
    }
    // Ordered pairs: all of them in full mode, every 7th in quick mode.
    let mut k = 0;
    for (a, oa) in &singles {
        for (b, ob) in &singles {
            k += 1;
            if !cfg.quick || k % 7 == 0 {
                out.push((format!("pair/{a}+{b}"), true, vec![oa.clone(), ob.clone()]));
            }
        }
    }
    out.push(("lines/many-runs".into(), false, workload::many_lines()));
    out.push(("space/reuse".into(), false, workload::space_reuse()));
    let mut rng = Rng(cfg.seed);
    let count = if cfg.quick { 6 } else { 300 };
    for i in 0..count {
        // The first sequence is long enough to pass the checkpoint threshold of the log.
        let len = if i == 0 {
            120
        } else {
            10 + rng.below(41) as usize
        };
        let ops = workload::random_sequence(&mut rng, len);
        out.push((format!("random/{}-{i}", cfg.seed), false, ops));
    }
    out
}

/// Run the harness; `progress` is called after each workload with (done, total).
pub fn run(cfg: &Config, progress: &mut dyn FnMut(usize, usize, &Outcome)) -> Outcome {
    let mut out = Outcome::default();
    let all: Vec<_> = workloads(cfg)
        .into_iter()
        .filter(|(n, _, _)| cfg.workload.as_ref().is_none_or(|w| n.contains(w.as_str())))
        .collect();
    let with_tree = explore::base_image(&|fs| workload::starting_tree(fs));
    // Random sequences start from an empty tree whose log tail has been moved near the
    // end of the log, so that they cross the wrap-around point.
    let empty = explore::base_image(&|fs| {
        for _ in 0..50 {
            fs.mkdir("/warm", 0o755)?;
            fs.rmdir("/warm")?;
        }
        Ok(())
    });
    let (with_tree, empty) = match (with_tree, empty) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            out.failures.push(Failure {
                workload: "setup".into(),
                crash_point: "-".into(),
                detail: e,
            });
            return out;
        }
    };
    // Workloads are independent: spread them over worker threads.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (tx, rx) = std::sync::mpsc::channel::<Outcome>();
    std::thread::scope(|scope| {
        for _ in 0..cfg.threads.max(1) {
            let tx = tx.clone();
            let (next, all, with_tree, empty) = (&next, &all, &with_tree, &empty);
            scope.spawn(move || {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((name, from_tree, ops)) = all.get(i) else {
                        break;
                    };
                    let image = if *from_tree { with_tree } else { empty };
                    let mut o = Outcome::default();
                    explore::explore(name, image, ops, cfg, &mut o);
                    if tx.send(o).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        for o in rx {
            out.merge(o);
            progress(out.workloads as usize, all.len(), &out);
        }
    });
    out
}
