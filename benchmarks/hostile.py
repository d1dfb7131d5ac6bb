"""Bounded cost on hostile inputs (issue 10): peak RSS, wall time and database size per bomb.

Each bomb is built in a temporary folder at the size of the original finding and fed to the
``convmem`` command in its own process (peak RSS from ``os.wait4``). Rounds are interleaved and
medians reported, with a baseline (a small valid file) measured in the same rounds. "gunzip s" is the
time to merely decompress the input, the floor any reader pays.

    python benchmarks/hostile.py [--rounds 3] [--scale 1.0] [--json out.json]

Bounds checked (exit 1 if any is broken): peak RSS <= 300 MB and wall time <= 10 s beyond
decompressing the input, for every bomb.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RSS_LIMIT_MB = 300.0
EXTRA_SECONDS = 10.0


def _gzip_lines(path: Path, line: bytes, count: int) -> Path:
    block = line * 65_536
    with gzip.open(path, "wb", compresslevel=9) as f:
        for _ in range(count // 65_536):
            f.write(block)
        f.write(line * (count % 65_536))
    return path


def build(root: Path, scale: float) -> dict[str, tuple[list[str], Path]]:
    """Return bomb name -> (convmem arguments, input path); ``--db`` is added where a command takes it."""
    root.mkdir(parents=True, exist_ok=True)
    n = lambda x: max(1, int(x * scale))  # noqa: E731
    empties = _gzip_lines(root / "empties.jsonl.gz", b"{}\n", n(22_000_000))
    bad = _gzip_lines(root / "bad.jsonl.gz", b"not json at all\n", n(300_000))
    # Valid JSON of no known format: each is an unreadable payload (the 187 MB database finding).
    unknown = _gzip_lines(root / "unknown.jsonl.gz", b'{"x": 1}\n', n(99_000))
    newlines = _gzip_lines(root / "newlines.jsonl.gz", b"\n", n(256 * 1024 * 1024))
    big = root / "openai_200k.json"
    roles = ("user", "assistant")
    messages = [{"role": roles[i % 2], "content": f"m{i}"} for i in range(n(200_000))]
    big.write_text(json.dumps({"user": "u_big", "messages": messages}), encoding="utf-8")
    fifo = root / "pipe.jsonl"
    if not fifo.exists():
        os.mkfifo(fifo)
    zero = root / "zero.jsonl"
    if not zero.exists():
        zero.symlink_to("/dev/zero")
    real = root / "real"
    real.mkdir(exist_ok=True)
    (real / "u_linked.json").write_text(json.dumps([{"role": "user", "content": "hello"}]), encoding="utf-8")
    folder = root / "archive"
    folder.mkdir(exist_ok=True)
    if not (folder / "linked").exists():
        (folder / "linked").symlink_to(real, target_is_directory=True)
    baseline = root / "baseline.json"
    baseline.write_text(json.dumps([{"role": "user", "content": "I live in Lyon."}]), encoding="utf-8")
    return {
        "baseline (1 valid message)": (["ingest", str(baseline), "--memory", "m"], baseline),
        "22M '{}' lines .jsonl.gz": (["ingest", str(empties), "--memory", "m"], empties),
        "300k bad lines .jsonl.gz": (["ingest", str(bad), "--memory", "m"], bad),
        "99k unreadable payloads .jsonl.gz": (["ingest", str(unknown), "--memory", "m"], unknown),
        "256 MiB newlines .jsonl.gz": (["ingest", str(newlines), "--memory", "m"], newlines),
        "22M '{}' lines .jsonl.gz (replay)": (["replay", str(empties), "--group-by", "file"], empties),
        "300k bad lines .jsonl.gz (replay)": (["replay", str(bad), "--group-by", "file"], bad),
        "200k-message OpenAI payload (normalize)": (["normalize", str(big)], big),
        "200k-message OpenAI payload (ingest)": (["ingest", str(big), "--memory", "m"], big),
        "FIFO .jsonl": (["ingest", str(fifo), "--memory", "m"], fifo),
        ".jsonl -> /dev/zero": (["ingest", str(zero), "--memory", "m"], zero),
        "symlinked folder (replay)": (["replay", str(folder), "--group-by", "file"], folder),
    }


def _gunzip_seconds(path: Path) -> float:
    if path.suffix != ".gz":
        return 0.0
    started = time.perf_counter()
    with gzip.open(path, "rb") as f:
        while f.read(1 << 20):
            pass
    return time.perf_counter() - started


def run_one(args: list[str], db: Path, timeout: float = 600.0) -> dict[str, Any]:
    """Run ``convmem ARGS --db DB`` in a child process; wall time, peak RSS, exit code, stderr."""
    for old in db.parent.glob(db.name + "*"):
        # The database, its WAL files and its directory of per-memory lock files.
        if old.is_dir():
            shutil.rmtree(old)
        else:
            old.unlink()
    takes_db = args[0] != "normalize"
    cmd = [sys.executable, "-m", "convmem_graph", *args, *(["--db", str(db)] if takes_db else [])]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = started + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.02)
    seconds = time.perf_counter() - started
    err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    size = sum(f.stat().st_size for f in db.parent.glob(db.name + "*") if f.is_file())
    return {
        "seconds": seconds,
        "rss_mb": usage.ru_maxrss / 1024,
        "exit": os.waitstatus_to_exitcode(status),
        "db_mb": size / 1e6,
        "stderr": err.strip().splitlines()[:3],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="bomb size (1.0 = the original findings)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.workdir or Path(tmp)
        bombs = build(root / "bombs", args.scale)
        floors = {name: _gunzip_seconds(path) for name, (_, path) in bombs.items()}
        sizes = {
            name: path.stat().st_size if path.is_file() and not path.is_symlink() else 0
            for name, (_, path) in bombs.items()
        }
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in bombs}
        for _ in range(args.rounds):  # interleaved: every bomb once per round
            for name, (cli, _) in bombs.items():
                runs[name].append(run_one(cli, root / "h.db"))
    rows = []
    ok = True
    baseline = statistics.median(r["seconds"] for r in next(iter(runs.values())))
    print(
        f"bound: peak RSS <= {RSS_LIMIT_MB:.0f} MB, "
        f"wall <= baseline {baseline:.2f} s + gunzip + {EXTRA_SECONDS:.0f} s"
    )
    head = f"{'input':42} {'bytes':>9} {'exit':>4} {'gunzip s':>8} {'wall s':>7} {'RSS MB':>7} {'db MB':>6}"
    print(f"{head}  first stderr line")
    for name, results in runs.items():
        size = sizes[name]
        wall = statistics.median(r["seconds"] for r in results)
        rss = statistics.median(r["rss_mb"] for r in results)
        db_mb = statistics.median(r["db_mb"] for r in results)
        bounded = rss <= RSS_LIMIT_MB and wall <= baseline + floors[name] + EXTRA_SECONDS
        ok &= bounded
        first = (results[-1]["stderr"] or [""])[0][:110]
        print(
            f"{name:42} {size:>9} {results[-1]['exit']:>4} {floors[name]:>8.2f} {wall:>7.2f} {rss:>7.1f} "
            f"{db_mb:>6.2f}  {first}{'' if bounded else '  <-- OVER BOUND'}"
        )
        rows.append(
            {
                "input": name,
                "bytes": size,
                "exit": results[-1]["exit"],
                "gunzip_s": round(floors[name], 3),
                "wall_s": round(wall, 3),
                "rss_mb": round(rss, 1),
                "db_mb": round(db_mb, 3),
                "rounds": [{k: v for k, v in r.items() if k != "stderr"} for r in results],
                "stderr": results[-1]["stderr"],
                "bounded": bounded,
            }
        )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    print("all bounded" if ok else "SOME INPUT IS OVER ITS BOUND")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
