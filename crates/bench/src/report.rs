//! Results: a row per (benchmark, thread count) with a value per target, printed as a
//! table per group with EngramFS's ratios to each baseline, and written as JSON.

use crate::Group;
use crate::goals::Goal;
use crate::targets::{Kind, TargetSet};
use std::fmt::Write as _;
use std::io;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    OpsPerSec,
    MBPerSec,
    Micros,
    Millis,
}

impl Unit {
    pub fn label(self) -> &'static str {
        match self {
            Unit::OpsPerSec => "ops/s",
            Unit::MBPerSec => "MB/s",
            Unit::Micros => "µs/op",
            Unit::Millis => "ms",
        }
    }

    pub fn higher_is_better(self) -> bool {
        matches!(self, Unit::OpsPerSec | Unit::MBPerSec)
    }

    /// How many times better `a` is than `b` (>1: `a` is faster).
    pub fn ratio(self, a: f64, b: f64) -> f64 {
        if self.higher_is_better() {
            a / b
        } else {
            b / a
        }
    }

    pub fn format(self, v: f64) -> String {
        match self {
            Unit::OpsPerSec if v >= 1e6 => format!("{:.2}M", v / 1e6),
            Unit::OpsPerSec if v >= 1e3 => format!("{:.1}k", v / 1e3),
            Unit::OpsPerSec => format!("{v:.0}"),
            Unit::MBPerSec => format!("{v:.0}"),
            Unit::Micros | Unit::Millis if v >= 100.0 => format!("{v:.0}"),
            Unit::Micros | Unit::Millis if v >= 10.0 => format!("{v:.1}"),
            Unit::Micros | Unit::Millis => format!("{v:.2}"),
        }
    }
}

/// A target (column) of the run and whether it ran.
#[derive(Clone, Debug)]
pub struct TargetInfo {
    pub name: String,
    pub kind: Kind,
    pub skipped: Option<String>,
}

#[derive(Clone, Debug)]
pub struct Row {
    pub group: Group,
    pub bench: String,
    pub threads: usize,
    pub unit: Unit,
    /// Column (target, or a standalone measurement such as "memcpy") and its result.
    pub values: Vec<(String, Result<f64, String>)>,
    pub note: Option<String>,
}

impl Row {
    /// The value of a column, if it was measured without error.
    pub fn get(&self, column: &str) -> Option<f64> {
        self.values
            .iter()
            .find(|(c, _)| c == column)
            .and_then(|(_, v)| v.as_ref().ok().copied())
    }

    pub(crate) fn set(&mut self, column: &str, v: io::Result<f64>) {
        let v = match v {
            Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
            Ok(x) => Err(format!("measured {x}, not a positive number")),
            Err(e) => Err(e.to_string()),
        };
        self.values.push((column.to_string(), v));
    }
}

pub struct Report {
    pub scale: String,
    pub threads: Vec<usize>,
    pub targets: Vec<TargetInfo>,
    pub rows: Vec<Row>,
    pub goals: Vec<Goal>,
    /// The host's cross-core latency at the start and at the end of the run, ns per one-way
    /// hand-off (`measure::handoff_ns`): the daemon's rows move with it.
    pub handoff_ns: Option<(f64, f64)>,
}

/// "engram-daemon" → "daemon", for the ratio headers.
fn short(name: &str) -> &str {
    name.strip_prefix("engram-").unwrap_or(name)
}

impl Report {
    pub(crate) fn new(scale: &str, threads: &[usize], set: &TargetSet) -> Report {
        let mut targets: Vec<TargetInfo> = set
            .live
            .iter()
            .map(|t| TargetInfo {
                name: t.name().to_string(),
                kind: t.kind(),
                skipped: None,
            })
            .collect();
        targets.extend(set.skipped.iter().map(|s| TargetInfo {
            name: s.name.clone(),
            kind: if s.name.starts_with("engram") {
                Kind::Engram
            } else {
                Kind::Baseline
            },
            skipped: Some(s.reason.clone()),
        }));
        Report {
            scale: scale.to_string(),
            threads: threads.to_vec(),
            targets,
            rows: Vec::new(),
            goals: Vec::new(),
            handoff_ns: None,
        }
    }

    /// Find a row.
    pub fn find(&self, group: Group, bench: &str, threads: usize) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.group == group && r.bench == bench && r.threads == threads)
    }

    pub(crate) fn row(
        &mut self,
        group: Group,
        bench: &str,
        threads: usize,
        unit: Unit,
        note: Option<String>,
    ) -> usize {
        self.rows.push(Row {
            group,
            bench: bench.to_string(),
            threads,
            unit,
            values: Vec::new(),
            note,
        });
        self.rows.len() - 1
    }

    pub(crate) fn print_targets(&self) {
        println!("\nTargets:");
        let w = self.targets.iter().map(|t| t.name.len()).max().unwrap_or(0);
        for t in &self.targets {
            match &t.skipped {
                None => println!("  {:<w$}  ran", t.name),
                Some(why) => println!("  {:<w$}  SKIPPED: {why}", t.name),
            }
        }
    }

    /// Whether a column holds an EngramFS front end.
    pub fn is_engram(&self, column: &str) -> bool {
        self.targets
            .iter()
            .any(|t| t.name == column && t.kind == Kind::Engram)
    }

    /// The columns with a value in `group`, targets in order first, then the rest.
    pub fn columns(&self, group: Group) -> Vec<String> {
        let rows: Vec<&Row> = self.rows.iter().filter(|r| r.group == group).collect();
        let mut cols: Vec<String> = Vec::new();
        let names = self.targets.iter().map(|t| t.name.as_str()).chain(
            rows.iter()
                .flat_map(|r| r.values.iter().map(|v| v.0.as_str())),
        );
        for name in names {
            let present = rows.iter().any(|r| r.values.iter().any(|v| v.0 == name));
            if present && !cols.iter().any(|c| c == name) {
                cols.push(name.to_string());
            }
        }
        cols
    }

    /// Ratio columns of a group: each EngramFS front end against each baseline, and the
    /// other front ends against the native API.
    pub fn ratio_pairs(&self, group: Group) -> Vec<(String, String)> {
        let cols = self.columns(group);
        let (eng, base): (Vec<&String>, Vec<&String>) =
            cols.iter().partition(|c| self.is_engram(c));
        let mut pairs = Vec::new();
        for e in &eng {
            for b in &base {
                pairs.push(((*e).clone(), (*b).clone()));
            }
        }
        for e in eng.iter().filter(|e| e.as_str() != "engram") {
            if eng.iter().any(|n| n.as_str() == "engram") {
                pairs.push(((*e).clone(), "engram".to_string()));
            }
        }
        pairs
    }

    pub(crate) fn print_group(&self, group: Group) {
        let rows: Vec<&Row> = self.rows.iter().filter(|r| r.group == group).collect();
        if rows.is_empty() {
            return;
        }
        let cols = self.columns(group);
        let pairs = self.ratio_pairs(group);
        let mut table: Vec<Vec<String>> = Vec::new();
        let mut header = vec!["benchmark".to_string(), "thr".into(), "unit".into()];
        header.extend(cols.iter().cloned());
        header.extend(
            pairs
                .iter()
                .map(|(a, b)| format!("{}/{}", short(a), short(b))),
        );
        table.push(header);
        let mut errors = Vec::new();
        for r in &rows {
            let mut line = vec![
                r.bench.clone(),
                r.threads.to_string(),
                r.unit.label().into(),
            ];
            for c in &cols {
                line.push(match r.values.iter().find(|v| &v.0 == c) {
                    None => "-".into(),
                    Some((_, Ok(v))) => r.unit.format(*v),
                    Some((_, Err(e))) => {
                        errors.push(format!("{} ({} thr) on {c}: {e}", r.bench, r.threads));
                        "error".into()
                    }
                });
            }
            for (a, b) in &pairs {
                line.push(match (r.get(a), r.get(b)) {
                    (Some(x), Some(y)) => format!("{:.2}x", r.unit.ratio(x, y)),
                    _ => "-".into(),
                });
            }
            table.push(line);
        }
        println!("\n== {} ==", group.title());
        print_table(&table, 3 + cols.len());
        if !pairs.is_empty() {
            println!("  ratios: how many times faster the first is than the second (>1: faster)");
        }
        let mut notes: Vec<&str> = rows.iter().filter_map(|r| r.note.as_deref()).collect();
        notes.dedup();
        for n in notes {
            println!("  note: {n}");
        }
        for e in errors {
            println!("  error: {e}");
        }
    }

    pub(crate) fn print_goals(&self) {
        crate::goals::print(&self.goals);
    }

    pub fn to_json(&self) -> String {
        let mut s = String::from("{\n");
        let _ = writeln!(s, "  \"scale\": {},", json_str(&self.scale));
        let threads: Vec<String> = self.threads.iter().map(|t| t.to_string()).collect();
        let _ = writeln!(s, "  \"threads\": [{}],", threads.join(", "));
        if let Some((start, end)) = self.handoff_ns {
            let _ = writeln!(
                s,
                "  \"handoff_ns\": {{\"start\": {start:.1}, \"end\": {end:.1}}},"
            );
        }
        s.push_str("  \"targets\": [\n");
        let targets: Vec<String> = self
            .targets
            .iter()
            .map(|t| {
                format!(
                    "    {{\"name\": {}, \"kind\": {}, \"ran\": {}, \"skipped\": {}}}",
                    json_str(&t.name),
                    json_str(if t.kind == Kind::Engram {
                        "engram"
                    } else {
                        "baseline"
                    }),
                    t.skipped.is_none(),
                    t.skipped.as_deref().map_or("null".into(), json_str)
                )
            })
            .collect();
        s.push_str(&targets.join(",\n"));
        s.push_str("\n  ],\n  \"rows\": [\n");
        let rows: Vec<String> = self.rows.iter().map(|r| self.row_json(r)).collect();
        s.push_str(&rows.join(",\n"));
        s.push_str("\n  ],\n  \"goals\": [\n");
        let goals: Vec<String> = self.goals.iter().map(|g| g.to_json()).collect();
        s.push_str(&goals.join(",\n"));
        s.push_str("\n  ]\n}\n");
        s
    }

    fn row_json(&self, r: &Row) -> String {
        let values: Vec<String> = r
            .values
            .iter()
            .map(|(c, v)| match v {
                Ok(x) => format!("{}: {}", json_str(c), json_num(*x)),
                Err(_) => format!("{}: null", json_str(c)),
            })
            .collect();
        let errors: Vec<String> = r
            .values
            .iter()
            .filter_map(|(c, v)| v.as_ref().err().map(|e| (c, e)))
            .map(|(c, e)| format!("{}: {}", json_str(c), json_str(e)))
            .collect();
        let ratios: Vec<String> = self
            .ratio_pairs(r.group)
            .iter()
            .filter_map(|(a, b)| {
                let x = r.unit.ratio(r.get(a)?, r.get(b)?);
                Some(format!(
                    "{}: {}",
                    json_str(&format!("{a}/{b}")),
                    json_num(x)
                ))
            })
            .collect();
        format!(
            "    {{\"group\": {}, \"bench\": {}, \"threads\": {}, \"unit\": {}, \
             \"higher_is_better\": {}, \"values\": {{{}}}, \"ratios\": {{{}}}, \
             \"errors\": {{{}}}, \"note\": {}}}",
            json_str(r.group.id()),
            json_str(&r.bench),
            r.threads,
            json_str(r.unit.label()),
            r.unit.higher_is_better(),
            values.join(", "),
            ratios.join(", "),
            errors.join(", "),
            r.note.as_deref().map_or("null".into(), json_str)
        )
    }
}

/// Print rows of cells, left-aligning the first column and right-aligning the others,
/// with a bar between the value columns (the first `split`) and the ratios.
fn print_table(rows: &[Vec<String>], split: usize) {
    let ncol = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let width: Vec<usize> = (0..ncol)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for (i, r) in rows.iter().enumerate() {
        let mut line = String::from(" ");
        for (c, cell) in r.iter().enumerate() {
            if c == split {
                line.push_str(" |");
            }
            let pad = width[c] - cell.chars().count();
            if c == 0 {
                let _ = write!(line, " {cell}{}", " ".repeat(pad));
            } else {
                let _ = write!(line, "  {}{cell}", " ".repeat(pad));
            }
        }
        println!("{}", line.trim_end());
        if i == 0 {
            println!(" {}", "-".repeat(line.chars().count().saturating_sub(1)));
        }
    }
}

pub(crate) fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

pub(crate) fn json_num(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.6}")
    } else {
        "null".into()
    }
}
