#!/usr/bin/env python3
"""Writes the benchmark tables of the manual and the README from the suite's JSON.

    cargo bench --bench suite                           # writes .../bench/results.json
    python3 benches/write-table.py [RESULTS_JSON ...]

docs/benchmarks.md gets every table and line the runs printed, section by section, each run
under its own heading (machine, date, commit, command); the README gets one row per store
(`dlock exec` beside the store's own tool, where it has one) from the run that measured most
of them. Each replaces what lies between its page's markers, so the pages show the runs given
and nothing older. Several runs (say `--only exec` and `--only contention,handoff`) are
written together; a section is taken from the last run that has it.
"""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "target/x86_64-unknown-linux-gnu/bench/results.json"
PAGE = ROOT / "docs/benchmarks.md"
README = ROOT / "README.md"
MARKS = {
    PAGE: ("<!-- bench-table: begin -->", "<!-- bench-table: end -->"),
    README: ("<!-- bench-summary: begin -->", "<!-- bench-summary: end -->"),
}

# The README's rows: (store, the `exec` row of dlock, the store's own tool in the same run).
STORES = [
    ("local (one host)", "dlock exec (local)", "flock FILE true"),
    ("Redis", "dlock exec (redis)", "redis-cli SET NX PX + EVAL delete"),
    ("Redis `?layout=plain`", "dlock exec (redis, layout=plain)", "redis-cli SET NX PX + EVAL delete"),
    ("Redis Cluster", "dlock exec (redis-cluster)", None),
    ("Redlock, 3 servers", "dlock exec (redlock, 3 servers)", None),
    ("etcd", "dlock exec (etcd)", "etcdctl lock"),
    ("ZooKeeper", "dlock exec (zookeeper)", None),
    ("PostgreSQL", "dlock exec (postgres)", "psql advisory lock"),
    ("PostgreSQL `?lock=advisory`", "dlock exec (postgres ?lock=advisory)", "psql advisory lock"),
    ("MySQL/MariaDB", "dlock exec (mysql)", "mariadb GET_LOCK"),
    ("MySQL/MariaDB `?lock=get_lock`", "dlock exec (mysql ?lock=get_lock)", "mariadb GET_LOCK"),
    ("memcached", "dlock exec (memcached)", None),
]


def ms(v):
    return "n/a" if v is None else f"{v:.2f} ms"


def cell(text):
    return str(text).replace("|", "\\|")


def markdown(table):
    head = table["head"]
    lines = [f"**{cell(table['title'])}**", "",
             "| " + " | ".join(cell(h) for h in head) + " |",
             "|" + "---|" * len(head)]
    for row in table["rows"]:
        cells = list(row) + [""] * (len(head) - len(row))
        if len(cells) > len(head):
            cells = cells[:len(head) - 1] + [" ".join(cells[len(head) - 1:])]
        lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return lines + [""]


def target_rows(targets):
    rows = ["| target | measured | goal | verdict |", "|---|---|---|---|"]
    for t in targets:
        value = t.get("value")
        measured = "n/a" if value is None else f"{value:.3g} {t.get('unit', '')}".strip()
        verdict = {True: "pass", False: "FAIL", None: "n/a"}[t.get("pass")]
        rows.append(f"| {cell(t['name'])} | {measured} | {cell(t.get('goal', ''))} | {verdict} |")
    return rows + [""]


def heading(results):
    machine = results.get("machine", {})
    dlock = results.get("dlock", {})
    options = results.get("options", {})
    only = options.get("only") or []
    flags = (" -- --only " + ",".join(only)) if only else ""
    flags += " --quick" if options.get("quick") else ""
    dirty = " (uncommitted changes)" if dlock.get("dirty") else ""
    return (f"Run of {results.get('started_at', '?')}, dlock {dlock.get('version', '?')} "
            f"at `{(dlock.get('commit') or '?')[:12]}`{dirty}, on {machine.get('cpus', '?')} "
            f"CPUs ({machine.get('cpu', '?')}), Linux {machine.get('kernel', '?')}: "
            f"`cargo bench --bench suite{flags}`, {options.get('runs', '?')} runs per command.")


def page(runs):
    lines = []
    for i, results in enumerate(runs):
        later = {n for r in runs[i + 1:] for n in r.get("printed", {})}
        printed = {n: b for n, b in results.get("printed", {}).items() if n not in later}
        if not printed:
            continue
        lines += [heading(results) + " Figures on a busy machine are noisy: compare the ratios.", ""]
        for name, blocks in printed.items():
            lines += [f"### `{name}`", ""]
            for block in blocks:
                lines += [cell(block["line"]), ""] if "line" in block else markdown(block)
        if results.get("targets"):
            lines += ["### Targets", ""] + target_rows(results["targets"])
    return "\n".join(lines)


def medians(results):
    found = {}
    for section in results.get("sections", {}).values():
        for p in section.get("peers", []) if isinstance(section, dict) else []:
            if "stats" in p:
                found.setdefault(p.get("name"), p["stats"].get("p50_ms"))
    return found


def rates(results):
    """(name, N) -> cycles/s of the contention rows (etcd's own table included)."""
    c = results.get("sections", {}).get("contention")
    if not isinstance(c, dict):
        return {}
    runs = (c.get("runs") or []) + (c.get("etcd_runs") or [])
    return {(r.get("name"), r.get("n")): r.get("cycles_per_s") for r in runs if isinstance(r, dict)}


def rate_cell(found, name):
    cells = [found.get((name, n)) for n in (8, 32)]
    if all(v is None for v in cells):
        return "—"
    return " / ".join("n/a" if v is None else f"{v:.0f}" for v in cells)


def summary(results):
    found = medians(results)
    contended = rates(results)
    flock = found.get("flock FILE true")
    rows = [heading(results), "",
            "| store | `dlock exec k -- true` | vs `flock` | the store's own tool, same run "
            "| cycles/s, 8 / 32 processes on one key |",
            "|---|---|---|---|---|"]
    if contended:
        rows.append(f"| `flock` (the peer) | {ms(flock)} | 1.00× | — "
                    f"| {rate_cell(contended, 'flock FILE true')} |")
    for store, mine, peer in STORES:
        if mine not in found:
            continue
        versus = f"{found[mine] / flock:.2f}×" if flock and found[mine] else "n/a"
        theirs = f"`{peer}` {ms(found.get(peer))}" if peer else "—"
        rows.append(f"| {store} | {ms(found[mine])} | {versus} | {theirs} "
                    f"| {rate_cell(contended, mine)} |")
    return "\n".join(rows) + "\n"


def write(path, text):
    begin, end = MARKS[path]
    content = path.read_text()
    head, rest = content.split(begin, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{begin}\n{text}\n{end}{tail}")


def main():
    paths = [pathlib.Path(a) for a in sys.argv[1:]] or [DEFAULT]
    runs = [json.loads(p.read_text()) for p in paths]
    write(PAGE, page(runs))
    with_exec = [r for r in runs if "exec" in r.get("sections", {})]
    if with_exec:
        # The run that measured most of the README's rows (a full run over an `--only exec`).
        rows = lambda r: sum(1 for _, mine, peer in STORES for n in (mine, peer) if n in medians(r))
        write(README, summary(max(reversed(with_exec), key=rows)))


if __name__ == "__main__":
    main()
