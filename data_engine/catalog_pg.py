"""The catalog's transactional tables on PostgreSQL (`hydranet engine catalog create --out DIR --postgres URL`).

data_engine/catalog_schema.py owns the schema and its migrations; they and the queries of catalog.py, registry.py, the
label modules, gate.py, ... speak SQLite's SQL through a DB-API connection (`execute`, `executemany`, `fetchone`,
`lastrowid`, `rowcount`); `connect` gives them a connection of the same shape over a PostgreSQL server (psycopg 3), so
the one schema, the same MIGRATIONS and every query run unchanged. This module's one job is that translation:

- statements: `?` -> `%s`; INSERT OR IGNORE -> ON CONFLICT DO NOTHING; INSERT OR REPLACE -> ON CONFLICT (the
  primary key) DO UPDATE; an INSERT into a table keyed by `id` returns it (`lastrowid`);
- transactions: SQLite's BEGIN IMMEDIATE (one writer at a time, readers never wait) -> BEGIN and a
  transaction-scoped advisory lock on the catalog, so concurrent writers queue exactly as they do on SQLite and a
  read-then-write (the next label version, the one production entry) never races;
- DDL: INTEGER -> BIGINT (SQLite's integers are 64-bit), REAL -> DOUBLE PRECISION, BLOB -> BYTEA, TEXT -> TEXT
  COLLATE "C" (byte order, as SQLite sorts: ORDER BY name gives the same rows on both), `id INTEGER PRIMARY KEY`
  -> an identity column;
- the PRAGMAs the catalog uses: application_id and user_version live in the table `hydranet_meta`, table_info
  reads information_schema; SQLite's journal and cache settings mean nothing here and do nothing;
- values: NaN binds as NULL (as sqlite3 binds it); errors come back as sqlite3's classes, and a server that does
  not answer, refuses the login or drops the connection is one line naming the URL (password hidden) and the fix.

Each catalog folder has its own PostgreSQL schema (hydranet_<lake id>, in its catalog.json) in the URL's
database: one server holds any number of catalogs.
"""
from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

META = "hydranet_meta"  # application_id and user_version (SQLite keeps them in its file header)
SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
CONNECT_TIMEOUT_S = 10


class PostgresError(ValueError):
    """A PostgreSQL catalog that cannot be reached or used; one line naming the URL and what to do."""


def masked(url: str) -> str:
    """The URL with its password hidden (user:***@host, password=***)."""
    return re.sub(r"(password=)\S+", r"\1***", re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url))


def _psycopg():
    try:
        import psycopg
    except ModuleNotFoundError:
        raise PostgresError("a PostgreSQL catalog needs psycopg, which is not installed: pip install 'hydranet-stack[engine]' "
                            "(from a checkout: pip install '.[engine]')") from None
    return psycopg


def _why(e: Exception) -> str:
    msg = " ".join(str(e).split())[:200] or type(e).__name__
    low = msg.lower()
    if "password" in low or "authentication" in low:
        return f"refuses the login ({msg})"
    if "does not exist" in low:
        return f"has no such database or role ({msg})"
    if "invalid" in low or "missing" in low or "syntax" in low:
        return f"is not a PostgreSQL URL ({msg})"
    return f"does not answer ({msg})"


def _open(url: str, fix: str):
    psycopg = _psycopg()
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, application_name="hydranet")
    except psycopg.Error as e:
        raise PostgresError(f"PostgreSQL at {masked(url)} {_why(e)}; {fix}") from None


def check_url(url: str) -> None:
    """Connect once and close: PostgresError (one line) when the server does not answer or refuses the login."""
    _open(url, "start the server, or give a --postgres URL that connects (postgresql://USER@HOST:PORT/DB; the "
               "password in ~/.pgpass or PGPASSWORD rather than in the URL)").close()


def drop_schema(url: str, schema: str) -> None:
    """Remove a catalog's schema and every table in it (a migration that failed halfway); a server gone meanwhile is
    left as it is (the schema's name is the new catalog's lake id, used by nothing else)."""
    if not SCHEMA_NAME.match(schema):
        raise PostgresError(f"{schema!r} is not a PostgreSQL schema name of a hydranet catalog")
    try:
        db = _open(url, "")
    except PostgresError:
        return
    with db:
        db.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def connect(url: str, schema: str, tables: Mapping[str, str], meta: str, where: str) -> "Connection":
    """A connection to the catalog in `schema` of `url`, for the statements of the schema `tables` (table -> its
    CREATE statement); the schema and the `meta` table (its CREATE statement) are made if missing. `where` names
    the catalog folder in errors."""
    if not SCHEMA_NAME.match(schema):
        raise PostgresError(f"{where}: {schema!r} is not a PostgreSQL schema name of a hydranet catalog; recreate the catalog")
    db = _open(url, f"start the server, or fix postgres.url in {where}/catalog.json")
    con = Connection(db, url, schema, tables, where)
    con.execute(f'SET search_path TO "{schema}"')
    con.execute("BEGIN")
    con.execute("SELECT pg_advisory_xact_lock(hashtextextended('hydranet-create-schema', 0))")  # two first opens at once
    con.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    con.execute(meta)
    con.execute("COMMIT")
    return con


# -- translation of one statement ---------------------------------------------------------------------------
_TOKENS = re.compile(r"'(?:[^']|'')*'|\"[^\"]*\"|\?|%")
_INSERT = re.compile(r"^\s*INSERT\s+(?:OR\s+(IGNORE|REPLACE)\s+)?INTO\s+(\w+)\s*\(([^)]*)\)", re.I)
_DDL_TYPES = ((r"\bid INTEGER PRIMARY KEY\b", "id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"),
              (r"\bINTEGER\b", "BIGINT"), (r"\bREAL\b", "DOUBLE PRECISION"), (r"\bBLOB\b", "BYTEA"),
              (r"\bTEXT\b", 'TEXT COLLATE "C"'))


def keys(tables: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """{table: its primary key columns} from the CREATE statements."""
    out = {}
    for t, stmt in tables.items():
        m = re.search(r"PRIMARY KEY\s*\(([^)]*)\)", stmt)
        out[t] = tuple(c.strip() for c in m.group(1).split(",")) if m else \
            ("id",) if re.search(r"[(,]\s*id INTEGER PRIMARY KEY", stmt) else ()
    return out


@lru_cache(maxsize=512)
def _translate(sql: str, pks: tuple[tuple[str, tuple[str, ...]], ...], many: bool) -> tuple[str, bool]:
    """(the PostgreSQL statement, whether it returns the new row's id) of one SQLite statement."""
    if re.match(r"\s*(CREATE|ALTER)\s+TABLE\b", sql, re.I):
        for pat, rep in _DDL_TYPES:
            sql = re.sub(pat, rep, sql)
    out = _TOKENS.sub(lambda m: "%s" if m.group() == "?" else m.group().replace("%", "%%"), sql)  # literals: '%' too
    m = _INSERT.match(out)
    if not m:
        return out, False
    verb, table, cols = m.group(1), m.group(2), [c.strip() for c in m.group(3).split(",")]
    pk = dict(pks).get(table, ())
    out = re.sub(r"^\s*INSERT\s+OR\s+\w+\s+INTO", "INSERT INTO", out, flags=re.I)
    if verb and verb.upper() == "IGNORE":
        out += " ON CONFLICT DO NOTHING"
    elif verb:
        if not pk:
            raise sqlite3.OperationalError(f"INSERT OR REPLACE into {table}, which has no primary key")
        rest = [c for c in cols if c not in pk]
        out += f" ON CONFLICT ({', '.join(pk)}) DO " + (
            f"UPDATE SET {', '.join(f'{c} = EXCLUDED.{c}' for c in rest)}" if rest else "NOTHING")
    returning = pk == ("id",) and not many
    return out + (" RETURNING id" if returning else ""), returning


def _value(v):
    return None if isinstance(v, float) and math.isnan(v) else v  # sqlite3 binds NaN as NULL


def _params(args: Sequence | None) -> tuple:
    return () if args is None else tuple(_value(v) for v in args)


# -- the connection -------------------------------------------------------------------------------------------
class Cursor:
    """What `execute` returns: fetchone, fetchall, iteration, rowcount, lastrowid (as sqlite3's cursor)."""

    def __init__(self, rows: Iterable[tuple] | None = None, rowcount: int = -1, lastrowid: int | None = None):
        self._rows = iter(rows or ())
        self.rowcount, self.lastrowid = rowcount, lastrowid

    def fetchone(self):
        return next(self._rows, None)

    def fetchall(self) -> list[tuple]:
        return list(self._rows)

    def __iter__(self):
        return self._rows


class Connection:
    """A psycopg connection (autocommit, as the catalog's sqlite3 connection with isolation_level=None) that takes
    the catalog's SQLite statements."""

    def __init__(self, db, url: str, schema: str, tables: Mapping[str, str], where: str):
        self._db, self.url, self.schema, self.where = db, url, schema, where
        self._pks = tuple(keys(tables).items())

    def close(self) -> None:
        self._db.close()

    def execute(self, sql: str, args: Sequence | None = None) -> Cursor:
        special = self._special(sql.strip())
        if special is not None:
            return special
        if sql.strip().upper() == "BEGIN IMMEDIATE":  # one writer at a time per catalog, as SQLite's write lock
            self._run("BEGIN")
            return self._run("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (self.schema,))
        stmt, returning = _translate(sql, self._pks, False)
        cur = self._run(stmt, _params(args))
        if returning:
            row = cur.fetchone()
            return Cursor(rowcount=cur.rowcount, lastrowid=None if row is None else int(row[0]))
        return cur

    def executemany(self, sql: str, seq: Iterable[Sequence]) -> Cursor:
        stmt, _ = _translate(sql, self._pks, True)
        rows = [_params(r) for r in seq]
        if not rows:
            return Cursor(rowcount=0)

        def run():
            cur = self._db.cursor()
            cur.executemany(stmt, rows)
            return Cursor(rowcount=cur.rowcount)  # the rows changed, all statements together (as sqlite3)
        return self._guard(run)

    def _run(self, stmt: str, args: tuple = ()) -> Cursor:
        def run():
            cur = self._db.execute(stmt, args)
            return Cursor(cur.fetchall() if cur.description else (), cur.rowcount)
        return self._guard(run)

    def _guard(self, fn):
        """`fn()`, with psycopg's errors as sqlite3's classes, and a lost server as one line naming it."""
        psycopg = _psycopg()
        try:
            return fn()
        except psycopg.Error as e:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            if self._db.closed or isinstance(e, psycopg.OperationalError) and (e.sqlstate or "08")[:2] in ("08", "57"):
                raise PostgresError(f"{self.where}: lost the connection to PostgreSQL at {masked(self.url)} ({msg}); "
                                    "check the server and rerun (every stage resumes)") from None
            kind = {psycopg.IntegrityError: sqlite3.IntegrityError, psycopg.DataError: sqlite3.DataError,
                    psycopg.ProgrammingError: sqlite3.OperationalError, psycopg.OperationalError: sqlite3.OperationalError}
            raise next((k for p, k in kind.items() if isinstance(e, p)), sqlite3.DatabaseError)(msg) from None

    # -- SQLite's own statements: the PRAGMAs and sqlite_master the catalog reads ----------------------------------
    def _special(self, sql: str) -> Cursor | None:
        if sql == "SELECT name FROM sqlite_master WHERE type='table'":
            return self._run("SELECT table_name FROM information_schema.tables WHERE table_schema = %s AND table_name != %s "
                             "ORDER BY table_name", (self.schema, META))
        m = re.fullmatch(r"PRAGMA\s+(\w+)\s*(?:=\s*(\S+)|\((\w+)\))?", sql, re.I)
        if m is None:
            return None
        name, value, arg = m.group(1).lower(), m.group(2), m.group(3)
        if name in ("foreign_keys", "journal_mode", "synchronous", "cache_size"):
            return Cursor()  # SQLite's settings: PostgreSQL always checks foreign keys, logs ahead and syncs
        if name in ("application_id", "user_version") and value is None:
            row = self._run(f"SELECT value FROM {META} WHERE key = %s", (name,)).fetchone()
            return Cursor([(0 if row is None else int(row[0]),)])
        if name in ("application_id", "user_version"):
            return self._run(f"INSERT INTO {META} (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = "
                             "EXCLUDED.value", (name, int(value)))
        if name == "table_info" and arg:  # (cid, name, type, notnull, default, pk) as SQLite lists them
            return self._run("SELECT ordinal_position - 1, column_name, data_type, is_nullable = 'NO', column_default, 0 "
                             "FROM information_schema.columns WHERE table_schema = %s AND table_name = %s ORDER BY "
                             "ordinal_position", (self.schema, arg))
        raise sqlite3.OperationalError(f"PRAGMA {name} has no PostgreSQL counterpart in data_engine/catalog_pg.py")
