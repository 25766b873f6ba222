//! The performance targets of the issue, checked against the measured rows (one thread,
//! native API unless named).

use crate::Group;
use crate::report::{Report, json_num, json_str};
use crate::targets::TMPFS_SHM;

#[derive(Clone, Debug)]
pub struct Goal {
    pub text: String,
    /// The measured ratio, in the direction of the goal (≥ need is met).
    pub measured: Option<f64>,
    pub need: f64,
    /// How it was computed, or why it could not be.
    pub detail: String,
}

impl Goal {
    pub fn met(&self) -> Option<bool> {
        self.measured.map(|m| m >= self.need)
    }

    pub(crate) fn to_json(&self) -> String {
        format!(
            "    {{\"goal\": {}, \"measured\": {}, \"need\": {}, \"met\": {}, \"detail\": {}}}",
            json_str(&self.text),
            self.measured.map_or("null".into(), json_num),
            json_num(self.need),
            self.met().map_or("null".into(), |m| m.to_string()),
            json_str(&self.detail)
        )
    }
}

/// A value of one column of a one-thread row. The `tmpfs` column is the faster of tmpfs on
/// the pools' mount and tmpfs on /dev/shm, when both ran: a target is met against the
/// better baseline only.
fn value(r: &Report, g: Group, bench: &str, col: &str) -> Result<f64, String> {
    let row = r
        .find(g, bench, 1)
        .ok_or_else(|| format!("\"{bench}\" (1 thread) was not run"))?;
    let v = row
        .get(col)
        .ok_or_else(|| format!("no value of \"{bench}\" on {col}"))?;
    Ok(match row.get(TMPFS_SHM) {
        Some(shm) if col == "tmpfs" && row.unit.ratio(shm, v) > 1.0 => shm,
        _ => v,
    })
}

/// Goal: (a on column ca) is `need` times better than (b on column cb).
#[allow(clippy::too_many_arguments)]
fn vs(r: &Report, text: &str, g: Group, a: &str, ca: &str, b: &str, cb: &str, need: f64) -> Goal {
    let unit = r.find(g, a, 1).map(|row| row.unit);
    let m = value(r, g, a, ca).and_then(|x| {
        let y = value(r, g, b, cb)?;
        Ok(unit.expect("row exists").ratio(x, y))
    });
    Goal {
        text: text.to_string(),
        measured: m.as_ref().ok().copied(),
        need,
        detail: match m {
            Ok(_) if a == b => format!("{a}: {ca} vs {cb}"),
            Ok(_) => format!("{a} on {ca} vs {b} on {cb}"),
            Err(e) => e,
        },
    }
}

/// The worst ratio of `ca` to `cb` over several rows.
fn worst(r: &Report, text: &str, benches: &[&str], ca: &str, cb: &str, need: f64) -> Goal {
    let mut worst: Option<(f64, &str)> = None;
    let mut missing = Vec::new();
    for b in benches {
        let Some(row) = r.find(Group::Micro, b, 1) else {
            missing.push(*b);
            continue;
        };
        match (row.get(ca), row.get(cb)) {
            (Some(x), Some(y)) => {
                let q = row.unit.ratio(x, y);
                if worst.is_none_or(|(w, _)| q < w) {
                    worst = Some((q, b));
                }
            }
            _ => missing.push(*b),
        }
    }
    Goal {
        text: text.to_string(),
        measured: worst.map(|w| w.0),
        need,
        detail: match worst {
            Some((_, b)) if missing.is_empty() => format!("worst: {b}"),
            Some((_, b)) => format!("worst: {b}; not measured: {}", missing.join(", ")),
            None => format!("not measured: {}", missing.join(", ")),
        },
    }
}

pub fn evaluate(r: &Report) -> Vec<Goal> {
    use Group::*;
    let mut g = vec![
        vs(
            r,
            "4 KiB read ≥ 3× tmpfs",
            Micro,
            "read 4K private",
            "engram",
            "read 4K private",
            "tmpfs",
            3.0,
        ),
        vs(
            r,
            "4 KiB read within 1.5× of a 4 KiB memcpy",
            Micro,
            "read 4K private",
            "engram",
            "read 4K private",
            "memcpy",
            1.0 / 1.5,
        ),
        vs(
            r,
            "4 KiB overwrite ≥ 1× tmpfs (non-durable) write",
            Micro,
            "overwrite 4K private",
            "engram",
            "overwrite 4K private",
            "tmpfs",
            1.0,
        ),
        vs(
            r,
            "4 KiB overwrite ≥ 50× ext4 write+fdatasync",
            Micro,
            "overwrite 4K private",
            "engram",
            "write 4K + fdatasync",
            "ext4",
            50.0,
        ),
        vs(
            r,
            "4 KiB append ≥ 3× tmpfs",
            Micro,
            "append 4K",
            "engram",
            "append 4K",
            "tmpfs",
            3.0,
        ),
    ];
    for op in ["create", "unlink", "rename"] {
        let b = format!("{op} private dir");
        g.push(vs(
            r,
            &format!("{op} ≥ 4× tmpfs"),
            Micro,
            &b,
            "engram",
            &b,
            "tmpfs",
            4.0,
        ));
        g.push(vs(
            r,
            &format!("{op} ≥ 15× ext4"),
            Micro,
            &b,
            "engram",
            &b,
            "ext4",
            15.0,
        ));
    }
    g.push(vs(
        r,
        "stat of a deep path ≥ 5× tmpfs",
        Micro,
        "stat 5-deep path",
        "engram",
        "stat 5-deep path",
        "tmpfs",
        5.0,
    ));
    g.push(worst(
        r,
        "daemon: metadata within 2× of in-process",
        &[
            "create private dir",
            "unlink private dir",
            "rename private dir",
            "stat 5-deep path",
        ],
        "engram-daemon",
        "engram",
        0.5,
    ));
    g.push(worst(
        r,
        "daemon: data equal to in-process (≥ 0.9×)",
        &["read 4K private", "overwrite 4K private", "append 4K"],
        "engram-daemon",
        "engram",
        0.9,
    ));
    g.push(vs(
        r,
        "varmail ≥ 5× ext4",
        Personality,
        "varmail",
        "engram",
        "varmail",
        "ext4",
        5.0,
    ));
    g.push(vs(
        r,
        "varmail ≥ 1.5× tmpfs",
        Personality,
        "varmail",
        "engram",
        "varmail",
        "tmpfs",
        1.5,
    ));
    let apps: [(&str, &str, &str, f64); 5] = [
        (
            "sqlite3 script (shim) ≥ 5× ext4",
            "sqlite3 script",
            "ext4",
            5.0,
        ),
        (
            "sqlite3 script (shim) ≥ 1.2× tmpfs",
            "sqlite3 script",
            "tmpfs",
            1.2,
        ),
        (
            "db_bench fillsync (shim) ≥ 10× ext4",
            "db_bench fillsync",
            "ext4",
            10.0,
        ),
        (
            "db_bench fillrandom (shim) ≥ 1.1× tmpfs",
            "db_bench fillrandom",
            "tmpfs",
            1.1,
        ),
        (
            "db_bench readrandom (shim) ≥ 1.1× tmpfs",
            "db_bench readrandom",
            "tmpfs",
            1.1,
        ),
    ];
    for (text, bench, base, need) in apps {
        g.push(vs(r, text, Apps, bench, "engram", bench, base, need));
    }
    let sizes: Vec<&str> = r
        .rows
        .iter()
        .filter(|row| row.group == Scaling)
        .map(|row| row.bench.as_str())
        .collect();
    if let (Some(small), Some(large)) = (sizes.first(), sizes.last())
        && small != large
    {
        let text = format!("{large} within 1.15× of {small}");
        g.push(vs(
            r,
            &text,
            Scaling,
            large,
            "engram",
            small,
            "engram",
            1.0 / 1.15,
        ));
    } else {
        g.push(Goal {
            text: "create at 1,000,000 entries within 1.15× of create at 10,000".into(),
            measured: None,
            need: 1.0 / 1.15,
            detail: "scaling rows were not run".into(),
        });
    }
    for b in ["append 1 MiB", "overwrite 1 MiB"] {
        g.push(vs(
            r,
            &format!("{b} ≥ 70 % of memcpy bandwidth"),
            Bandwidth,
            b,
            "engram",
            b,
            "memcpy",
            0.7,
        ));
    }
    g
}

pub fn print(goals: &[Goal]) {
    if goals.is_empty() {
        return;
    }
    println!("\n== Targets of the issue (one thread, native API unless named) ==");
    let w = goals
        .iter()
        .map(|g| g.text.chars().count())
        .max()
        .unwrap_or(0);
    for g in goals {
        let (m, verdict) = match (g.measured, g.met()) {
            (Some(m), Some(true)) => (format!("{m:.2}"), "met"),
            (Some(m), _) => (format!("{m:.2}"), "MISSED"),
            _ => ("-".into(), "n/a"),
        };
        let pad = " ".repeat(w - g.text.chars().count());
        println!(
            "  {}{pad}  measured {m:>7} need ≥ {:<5.2} {verdict:<6}  ({})",
            g.text, g.need, g.detail
        );
    }
    println!("  (measured: ratio in the goal's direction, e.g. 3.10 = 3.1× faster)");
    println!("  (tmpfs: the faster of tmpfs on the pools' mount and {TMPFS_SHM}, when both ran)");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Row, Unit};

    fn row(unit: Unit, tmpfs: f64, shm: f64) -> Report {
        Report {
            scale: "test".into(),
            threads: vec![1],
            handoff_ns: None,
            targets: Vec::new(),
            rows: vec![Row {
                group: Group::Micro,
                bench: "b".into(),
                threads: 1,
                unit,
                values: vec![("tmpfs".into(), Ok(tmpfs)), (TMPFS_SHM.into(), Ok(shm))],
                note: None,
            }],
            goals: Vec::new(),
        }
    }

    #[test]
    fn tmpfs_baseline_is_the_faster_of_both_mounts() {
        let r = row(Unit::OpsPerSec, 100.0, 150.0);
        assert_eq!(value(&r, Group::Micro, "b", "tmpfs"), Ok(150.0));
        let r = row(Unit::OpsPerSec, 200.0, 150.0);
        assert_eq!(value(&r, Group::Micro, "b", "tmpfs"), Ok(200.0));
        // Latency: lower is faster.
        let r = row(Unit::Micros, 5.0, 4.0);
        assert_eq!(value(&r, Group::Micro, "b", "tmpfs"), Ok(4.0));
        assert_eq!(value(&r, Group::Micro, "b", TMPFS_SHM), Ok(4.0));
    }
}
