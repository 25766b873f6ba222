//! Running operations against the model and EngramFS and comparing them; known engine bugs.

use super::engine::Engine;
use super::ops::{Op, OpT, ToPath};
use super::posix_model::Model;
use super::tree::diff_trees;
use super::values::{Val, show};

// ---------------------------------------------------------------------------------------
// Known engine bugs
// ---------------------------------------------------------------------------------------

type BugCheck = fn(&Model, &Op) -> Option<&'static str>;

impl Model {
    /// The known engine bug `op` would hit in the current state, if any. The random test
    /// skips such operations (on both sides) so that it keeps finding other problems;
    /// each bug has an ignored regression case in `regressions.rs`, named like the bug.
    pub fn known_bug(&self, op: &Op) -> Option<&'static str> {
        const CHECKS: &[BugCheck] = &[];
        CHECKS.iter().find_map(|check| check(self, op))
    }
}

// ---------------------------------------------------------------------------------------
// Running a case
// ---------------------------------------------------------------------------------------

fn compare_trees(model: &Model, eng: &Engine, when: &str) -> Result<(), String> {
    let got = eng
        .tree()
        .map_err(|e| format!("{when}: walking EngramFS: {e}"))?;
    match diff_trees(&model.tree(), &got) {
        None => Ok(()),
        Some(d) => Err(format!("{when}: trees differ (model = Linux):\n{d}")),
    }
}

fn check_state(model: &Model, eng: &Engine, when: &str) -> Result<(), String> {
    compare_trees(model, eng, when)?;
    eng.fsck().map_err(|e| format!("{when}: {e}"))
}

/// Run `ops` against the model and EngramFS; the first disagreement, as a message that
/// lists the concrete operations run so far.
pub fn run_ops<T: ToPath>(ops: &[OpT<T>], skip_known: bool) -> Result<(), String> {
    let mut model = Model::new();
    let mut eng = Engine::new();
    let mut done: Vec<Op> = Vec::new();
    let paranoid = std::env::var_os("ENGRAM_MODEL_PARANOID").is_some();
    let fail = |done: &[Op], msg: String| {
        let list: Vec<String> = done.iter().map(|o| format!("    {o:?}")).collect();
        Err(format!(
            "{msg}\n  concrete operations run:\n{}",
            list.join("\n")
        ))
    };
    for op in ops {
        for op in op.map(|p| p.to_path(&model)).expand() {
            if skip_known && model.known_bug(&op).is_some() {
                continue;
            }
            done.push(op.clone());
            let i = done.len() - 1;
            let want = model.apply(&op);
            let got = match op {
                OpT::Remount => eng.remount().map(|()| Ok(Val::Unit)),
                _ => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| eng.apply(&op)))
                    .map_err(|p| {
                        let msg = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
                        format!("EngramFS panicked: {}", msg.unwrap_or_default())
                    }),
            };
            let got = match got {
                Ok(got) => got,
                Err(e) => return fail(&done, format!("op #{i} {op:?}: {e}")),
            };
            if want != got {
                let msg = format!(
                    "op #{i} {op:?}:\n  model (Linux): {}\n  EngramFS:      {}",
                    show(&want),
                    show(&got)
                );
                return fail(&done, msg);
            }
            let r = if matches!(op, OpT::Remount) {
                check_state(&model, &eng, &format!("after remount at op #{i}"))
            } else if paranoid {
                compare_trees(&model, &eng, &format!("after op #{i}"))
            } else {
                Ok(())
            };
            if let Err(e) = r {
                return fail(&done, e);
            }
        }
    }
    let r = check_state(&model, &eng, "at the end").and_then(|()| {
        eng.remount()?;
        model
            .apply(&OpT::Remount)
            .map_err(|e| format!("model remount: {e}"))?;
        check_state(&model, &eng, "after the final remount")
    });
    match r {
        Ok(()) => Ok(()),
        Err(e) => fail(&done, e),
    }
}

pub(crate) fn skip_known() -> bool {
    std::env::var_os("ENGRAM_MODEL_NO_SKIP").is_none()
}
