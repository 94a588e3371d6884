#!/usr/bin/env python3
"""Writes the current benchmark table into docs/benchmarks.md from the suite's JSON.

    cargo bench --bench suite -- --only exec            # writes .../bench/results.json
    python3 benches/write-table.py [RESULTS_JSON]

The table replaces what lies between the `<!-- bench-table -->` markers of the page, so the
page always shows one run: its machine, date, commit and command, and nothing older.
"""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "target/x86_64-unknown-linux-gnu/bench/results.json"
PAGE = ROOT / "docs/benchmarks.md"
BEGIN, END = "<!-- bench-table: begin -->", "<!-- bench-table: end -->"


def ms(v):
    return "n/a" if v is None else f"{v:.2f}"


def exec_rows(section):
    peers = section.get("peers", [])
    flock = next((p["stats"]["p50_ms"] for p in peers
                  if p.get("name", "").startswith("flock") and "stats" in p), None)
    rows = ["| command | median ms | p95 ms | vs `flock` |", "|---|---|---|---|"]
    for p in peers:
        name = p.get("name", "?")
        if "stats" not in p:
            error = str(p.get("error", "")).splitlines()[0][:60] if p.get("error") else ""
            rows.append(f"| {name} | n/a | n/a | {error} |")
            continue
        s = p["stats"]
        versus = f"{s['p50_ms'] / flock:.2f}×" if flock else ""
        rows.append(f"| {name} | {ms(s['p50_ms'])} | {ms(s['p95_ms'])} | {versus} |")
    return rows


def target_rows(targets):
    rows = ["| target | measured | goal | verdict |", "|---|---|---|---|"]
    for t in targets:
        value = t.get("value")
        measured = "n/a" if value is None else f"{value:.3g} {t.get('unit', '')}".strip()
        verdict = {True: "pass", False: "FAIL", None: "n/a"}[t.get("pass")]
        rows.append(f"| {t['name']} | {measured} | {t.get('goal', '')} | {verdict} |")
    return rows


def table(results):
    machine = results.get("machine", {})
    dlock = results.get("dlock", {})
    options = results.get("options", {})
    only = ",".join(options.get("only") or []) or "every section"
    quick = " --quick" if options.get("quick") else ""
    lines = [
        f"Run of {results.get('started_at', '?')} (UTC), dlock {dlock.get('version', '?')} at "
        f"`{(dlock.get('commit') or '?')[:12]}`{' (uncommitted changes)' if dlock.get('dirty') else ''}, "
        f"on {machine.get('cpus', '?')} CPUs ({machine.get('cpu', '?')}), Linux "
        f"{machine.get('kernel', '?')}; sections: {only}{quick}, {options.get('runs', '?')} runs "
        "per command. Figures on a busy machine are noisy: compare the ratios.",
        "",
    ]
    sections = results.get("sections", {})
    if "exec" in sections:
        lines += ["Wall time of one run, from spawn to exit:", ""] + exec_rows(sections["exec"]) + [""]
    if results.get("targets"):
        lines += target_rows(results["targets"]) + [""]
    return "\n".join(lines)


def main():
    path = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    results = json.loads(path.read_text())
    page = PAGE.read_text()
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    PAGE.write_text(f"{head}{BEGIN}\n{table(results)}{END}{tail}")


if __name__ == "__main__":
    main()
