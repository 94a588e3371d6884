//! The report: the sections' tables as each section ends, then the targets with PASS/FAIL
//! and the previous run's figures, and the JSON in `results.json` plus a timestamped copy.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Map, Value};

use crate::procs::interrupted;

/// What a section measured: its tables and lines in the order they are printed, its JSON,
/// and the targets it checks.
#[derive(Default)]
pub struct Section {
    pub blocks: Vec<Block>,
    pub json: Option<Value>,
    pub targets: Vec<Target>,
}

pub enum Block {
    Table(String, Table),
    Line(String),
}

impl Section {
    pub fn table(&mut self, title: impl Into<String>, table: Table) {
        self.blocks.push(Block::Table(title.into(), table));
    }

    pub fn line(&mut self, text: impl Into<String>) {
        self.blocks.push(Block::Line(text.into()));
    }

    pub fn target(
        &mut self,
        name: &str,
        unit: &'static str,
        value: Result<f64, String>,
        goal: Goal,
    ) {
        self.targets.push(Target {
            name: name.to_string(),
            unit,
            value,
            goal,
        });
    }
}

/// `--baseline`: figures of this binary over the same figures of the baseline binary,
/// measured in the same rounds: the median of the rounds' ratios, and their range.
pub struct Versus {
    table: Table,
    json: Vec<Value>,
}

impl Versus {
    pub fn new() -> Versus {
        let head = ["row", "figure", "this / baseline", "rounds"];
        Versus {
            table: Table::new(&head).text_cols(2),
            json: Vec::new(),
        }
    }

    pub fn add(&mut self, row: &str, figure: &str, r: Option<(f64, f64, f64)>) {
        let range = r.map_or_else(|| "n/a".into(), |(_, lo, hi)| format!("{lo:.2}–{hi:.2}"));
        let cells = vec![row.into(), figure.into(), ratio(r.map(|r| r.0)), range];
        self.table.row(cells);
        self.json.push(json!({
            "row": row, "figure": figure, "ratio": r.map(|r| r.0),
            "min": r.map(|r| r.1), "max": r.map(|r| r.2),
        }));
    }

    /// The table, and `baseline` in the section's JSON; nothing without `--baseline`.
    pub fn finish(self, section: &mut Section, title: &str) {
        if self.json.is_empty() {
            return;
        }
        if let Some(Value::Object(m)) = &mut section.json {
            m.insert("baseline".into(), Value::Array(self.json));
        }
        section.table(format!("{title}: this binary / --baseline"), self.table);
    }
}

/// The whole run's results, section by section.
pub struct Report {
    started: Instant,
    started_at: SystemTime,
    sections: Map<String, Value>,
    /// Every printed table and line, section by section.
    printed: Map<String, Value>,
    timings: Map<String, Value>,
    targets: Vec<Target>,
}

impl Report {
    pub fn new() -> Report {
        Report {
            started: Instant::now(),
            started_at: SystemTime::now(),
            sections: Map::new(),
            printed: Map::new(),
            timings: Map::new(),
            targets: Vec::new(),
        }
    }

    /// Prints a section's tables and keeps its JSON and targets.
    pub fn add(&mut self, name: &str, section: Section, took: Duration) {
        let mut printed = Vec::new();
        for block in &section.blocks {
            match block {
                Block::Table(title, table) => {
                    table.print(title);
                    printed.push(table.json(title));
                }
                Block::Line(text) => {
                    println!("{text}");
                    printed.push(json!({ "line": text }));
                }
            }
        }
        self.printed.insert(name.into(), Value::Array(printed));
        if let Some(json) = section.json {
            self.sections.insert(name.into(), json);
        }
        self.targets.extend(section.targets);
        self.timings.insert(name.into(), json!(took.as_secs_f64()));
    }

    /// Prints the targets next to the previous run's figures and writes the JSON in
    /// `out_dir`.
    pub fn finish(self, options: Value, out_dir: &Path) {
        let latest = out_dir.join("results.json");
        let targets = report_targets(&self.targets, &previous_targets(&latest));
        let stamp = humantime::format_rfc3339_seconds(self.started_at).to_string();
        let results = json!({
            "suite": "dlock",
            "format": 1,
            "started_at": stamp,
            "seconds": self.started.elapsed().as_secs_f64(),
            "section_seconds": self.timings,
            "interrupted": interrupted(),
            "options": options,
            "dlock": {
                "version": env!("CARGO_PKG_VERSION"),
                "commit": git(&["rev-parse", "HEAD"]),
                "dirty": git(&["status", "--porcelain"]).map(|s| !s.is_empty()),
            },
            "machine": machine(),
            "tools": {
                "flock": tool_version("flock", &["--version"]),
                "etcd": tool_version("etcd", &["--version"]),
                "redis-server": tool_version("redis-server", &["--version"]),
            },
            "sections": self.sections,
            "printed": self.printed,
            "targets": targets,
        });
        let stamped = out_dir.join(format!("results-{}.json", stamp.replace([':', '-'], "")));
        let text = serde_json::to_string_pretty(&results).unwrap_or_default() + "\n";
        // An interrupted run is kept, but does not replace the latest complete one.
        let written = std::fs::create_dir_all(out_dir)
            .and_then(|_| std::fs::write(&stamped, &text))
            .and_then(|_| match interrupted() {
                true => Ok(()),
                false => std::fs::write(&latest, &text),
            });
        match written {
            Ok(()) if interrupted() => println!("\nresults (interrupted): {}", stamped.display()),
            Ok(()) => println!(
                "\nresults: {} (and {}); {:.0} s",
                latest.display(),
                stamped.display(),
                self.started.elapsed().as_secs_f64()
            ),
            Err(e) => eprintln!("suite: cannot write {}: {e}", stamped.display()),
        }
    }
}

pub fn ms(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.3}")
    } else if v < 1000.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

pub fn rate(v: f64) -> String {
    format!("{v:.0}")
}

pub fn ratio(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), |r| format!("{r:.2}x"))
}

/// One line, at most 120 characters, for tables.
pub fn short(e: &str) -> String {
    let line = e.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= 120 {
        line
    } else {
        format!("{}…", line.chars().take(119).collect::<String>())
    }
}

pub fn na(e: &str) -> String {
    format!("n/a (error: {})", short(e))
}

enum Row {
    Cells(Vec<String>),
    /// Leading cells (the row's name), then the error in place of the figures.
    Failed(Vec<String>, String),
}

pub struct Table {
    head: Vec<&'static str>,
    rows: Vec<Row>,
    /// How many leading columns are text (left-aligned); the rest are figures.
    text_cols: usize,
}

impl Table {
    pub fn new(head: &[&'static str]) -> Table {
        Table {
            head: head.to_vec(),
            rows: Vec::new(),
            text_cols: 1,
        }
    }

    pub fn text_cols(mut self, n: usize) -> Table {
        self.text_cols = n;
        self
    }

    fn pad(&self, i: usize, c: &str, width: usize) -> String {
        if i < self.text_cols {
            format!("{c:<width$}")
        } else {
            format!("{c:>width$}")
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(Row::Cells(cells));
    }

    pub fn failed(&mut self, name: impl Into<String>, err: &str) {
        self.rows
            .push(Row::Failed(vec![name.into()], err.to_string()));
    }

    pub fn failed_cells(&mut self, lead: Vec<String>, err: &str) {
        self.rows.push(Row::Failed(lead, err.to_string()));
    }

    /// The table as printed, for the JSON: `benches/write-table.py` writes the manual's
    /// tables from it, so the page shows what the terminal showed.
    fn json(&self, title: &str) -> Value {
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|row| match row {
                Row::Cells(cells) => cells.clone(),
                Row::Failed(lead, err) => {
                    let mut cells = lead.clone();
                    cells.push(na(err));
                    cells
                }
            })
            .collect();
        json!({"title": title, "head": self.head, "rows": rows})
    }

    fn print(&self, title: &str) {
        let mut w: Vec<usize> = self.head.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            let (Row::Cells(cells) | Row::Failed(cells, _)) = row;
            for (i, c) in cells.iter().enumerate().take(w.len()) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let cells: Vec<String> = cells
                .iter()
                .enumerate()
                .take(w.len())
                .map(|(i, c)| self.pad(i, c, w[i]))
                .collect();
            cells.join("  ")
        };
        println!("\n{title}");
        let head: Vec<String> = self.head.iter().map(|h| h.to_string()).collect();
        println!("{}", line(&head).trim_end());
        let dashes: Vec<String> = w.iter().map(|n| "-".repeat(*n)).collect();
        println!("{}", line(&dashes));
        for row in &self.rows {
            match row {
                Row::Cells(cells) => println!("{}", line(cells).trim_end()),
                Row::Failed(lead, err) => println!("{}  {}", line(lead), na(err)),
            }
        }
    }
}

/// A goal from the issues, checked against what this run measured.
pub struct Target {
    name: String,
    unit: &'static str,
    value: Result<f64, String>,
    goal: Goal,
}

#[derive(Clone, Copy)]
pub enum Goal {
    AtMost(f64),
    AtLeast(f64),
    Below(f64),
}

impl Goal {
    fn check(self, v: f64) -> bool {
        match self {
            Goal::AtMost(g) => v <= g,
            Goal::AtLeast(g) => v >= g,
            Goal::Below(g) => v < g,
        }
    }

    fn text(self, unit: &str) -> String {
        match self {
            Goal::AtMost(g) => format!("<= {g}{}", spaced(unit)),
            Goal::AtLeast(g) => format!(">= {g}{}", spaced(unit)),
            Goal::Below(g) => format!("< {g}{}", spaced(unit)),
        }
    }
}

/// `x` sticks to its number (1.3x); other units are spaced (2 ms).
fn spaced(unit: &str) -> String {
    if unit == "x" {
        unit.to_string()
    } else {
        format!(" {unit}")
    }
}

fn fmt_value(v: f64, unit: &str) -> String {
    if unit == "x" {
        format!("{v:.2}x")
    } else if v.abs() >= 100.0 {
        format!("{v:.0} {unit}")
    } else {
        format!("{v:.3} {unit}")
    }
}

fn tool_version(cmd: &str, args: &[&str]) -> Value {
    match Command::new(cmd).args(args).stdin(Stdio::null()).output() {
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout);
            json!(text.lines().next().unwrap_or("").trim())
        }
        Err(_) => Value::Null,
    }
}

fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git")
        .arg("-C")
        .arg(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim().to_string())
    });
    json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).ok(),
        "cpu": cpu,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|s| s.trim().to_string()),
    })
}

/// Prints the targets with the previous run's figures, and returns them as JSON.
fn report_targets(targets: &[Target], previous: &BTreeMap<String, f64>) -> Value {
    let mut table = Table::new(&["target", "measured", "goal", "verdict", "previous run"]);
    let mut out = Vec::new();
    for t in targets {
        let prev = previous
            .get(&t.name)
            .map_or(String::new(), |v| fmt_value(*v, t.unit));
        match &t.value {
            Ok(v) => {
                let pass = t.goal.check(*v);
                table.row(vec![
                    t.name.clone(),
                    fmt_value(*v, t.unit),
                    t.goal.text(t.unit),
                    if pass { "PASS" } else { "FAIL" }.into(),
                    prev,
                ]);
                out.push(json!({
                    "name": t.name, "unit": t.unit, "value": v,
                    "goal": t.goal.text(t.unit), "pass": pass,
                }));
            }
            Err(e) => {
                table.failed(t.name.clone(), e);
                out.push(json!({
                    "name": t.name, "unit": t.unit, "value": null,
                    "goal": t.goal.text(t.unit), "pass": null, "error": e,
                }));
            }
        }
    }
    table.print("Targets");
    Value::Array(out)
}

fn previous_targets(path: &Path) -> BTreeMap<String, f64> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return BTreeMap::new();
    };
    let Ok(v) = serde_json::from_str::<Value>(&text) else {
        return BTreeMap::new();
    };
    v["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| Some((t["name"].as_str()?.to_string(), t["value"].as_f64()?)))
        .collect()
}
