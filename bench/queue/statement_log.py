"""Count what the services send to Postgres, exactly, from the server's statement log.

`capture(conn, log_file)` turns on `log_statement = 'all'` (server-wide, `ALTER SYSTEM` and a
reload: the bench owns the server) for the duration of a `with` block and returns the log lines
written meanwhile; `tally(lines, database)` counts, per backend, the transactions committed, the
statements, BEGINs, ROLLBACKs and statements run outside a transaction block (each of those commits
on its own). Statements of connections whose `application_name` is `bench` (the bench's own polling)
are left out.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

PREFIX = "%m [%p] db=%d app=%a "
_LINE = re.compile(
    r"^\S+ \S+ \S+ \[(?P<pid>\d+)\] db=(?P<db>\S*) app=(?P<app>.*?) "
    r"LOG:  (?:statement|execute [^:]*): (?P<sql>.*)$"
)
_WORD = re.compile(r"^\s*(\w+)")


@dataclass
class Tally:
    """What the logged statements add up to."""

    commits: int = 0  # COMMIT/END of an explicit transaction
    autocommits: int = 0  # statements outside a transaction block (each its own transaction)
    begins: int = 0
    rollbacks: int = 0
    statements: int = 0  # every statement sent, BEGIN/COMMIT/ROLLBACK included
    empty_transactions: int = 0  # BEGIN; [";" or SELECT 1]; ROLLBACK — connection pings
    first_words: Counter[str] = field(default_factory=Counter)

    @property
    def transactions(self) -> int:
        """Transactions that committed: explicit ones and single statements outside a block."""
        return self.commits + self.autocommits


@contextmanager
def capture(conn: psycopg.Connection[Any], log_file: Path) -> Iterator[list[str]]:
    """Log every statement while the block runs; the list holds the new log lines afterwards."""
    lines: list[str] = []
    conn.execute("ALTER SYSTEM SET log_statement = 'all'")
    conn.execute(f"ALTER SYSTEM SET log_line_prefix = '{PREFIX}'")
    conn.execute("SELECT pg_reload_conf()")
    time.sleep(0.3)  # every backend reloads its configuration at its next command
    offset = log_file.stat().st_size
    try:
        yield lines
    finally:
        time.sleep(0.3)
        conn.execute("ALTER SYSTEM RESET log_statement")
        conn.execute("ALTER SYSTEM RESET log_line_prefix")
        conn.execute("SELECT pg_reload_conf()")
        with log_file.open("rb") as f:
            f.seek(offset)
            lines.extend(f.read().decode(errors="replace").splitlines())


def tally(lines: list[str], database: str) -> Tally:
    """Count the statements of `database` in `lines` (see the module docstring)."""
    t = Tally()
    in_block: dict[str, bool] = {}
    block: dict[str, list[str]] = {}
    for line in lines:
        m = _LINE.match(line)
        if m is None or m["db"] != database or m["app"] == "bench":
            continue
        pid, sql = m["pid"], m["sql"].strip().rstrip(";").strip()
        word = (_WORD.match(sql)[1].upper()) if _WORD.match(sql) else ";"
        t.statements += 1
        t.first_words[word] += 1
        if word in ("BEGIN", "START"):
            t.begins += 1
            in_block[pid] = True
            block[pid] = []
        elif word in ("COMMIT", "END"):
            t.commits += 1
            in_block[pid] = False
        elif word == "ROLLBACK":
            t.rollbacks += 1
            if all(s in ("", "SELECT 1") for s in block.get(pid, [])):
                t.empty_transactions += 1
            in_block[pid] = False
        elif in_block.get(pid):
            block[pid].append(sql)
        else:
            t.autocommits += 1
    return t
