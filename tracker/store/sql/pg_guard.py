"""The PostgreSQL statement guard: what user SQL may run is read by the server's own parser
(pglast, libpg_query), never by a lexer of tracker's: exactly one SELECT, WITH or VALUES query,
with no writing WITH query, SELECT INTO or FOR UPDATE/SHARE. Every name in the whole tree that may
run code (a function, in any clause, LIMIT and OFFSET included; a name after a dot, which may call
a function on a row; an operator; a type; a relation) is looked up in the catalog and refused
unless it is PostgreSQL's own (``pg_catalog``, from no extension) and none of ``OUTSIDE``, or a
relation of the store's or the system catalogs', before anything is planned: the planner runs
IMMUTABLE functions when it folds constants. The server is then given the parse tree written back,
so it reads what was checked. The server's own plan (``EXPLAIN (VERBOSE, FORMAT JSON)``, every
view expanded) is read as a second guard, and one over ``PLAN_BYTES`` (a constant the planner
folded, such as ``repeat('x', 1000000000)``) is refused unread."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from tracker.errors import StoreError, first_line
from tracker.store.sql.common import ONE_QUERY, ONE_STATEMENT

# PostgreSQL functions that act outside the query's read-only transaction, by what they reach.
OUTSIDE = {
    "files on the server": (
        "pg_read_file",
        "pg_read_binary_file",
        "pg_ls_*",
        "pg_stat_file",
        "pg_file_*",
        "pg_logdir_ls",
        "pg_current_logfile",
        "lo_*",
        "loread",
        "lowrite",
        "pg_hba_file_rules",
        "pg_ident_file_mappings",
        "pg_show_all_file_settings",
        "pg_config",
    ),
    "indexes, which it writes": ("brin_summarize_*", "brin_desummarize_range", "gin_clean_pending_list"),
    "other sessions": (
        "pg_terminate_backend",
        "pg_cancel_backend",
        "pg_signal_backend",
        "pg_notify",
        "pg_advisory_*",
        "pg_try_advisory_*",
        "dblink*",
    ),
    "the server": (
        "set_config",
        "pg_reload_conf",
        "pg_rotate_logfile",
        "pg_promote",
        "pg_switch_wal",
        "pg_create_restore_point",
        "pg_backup_*",
        "pg_start_backup",
        "pg_stop_backup",
        "pg_wal_replay_*",
        "pg_log_backend_memory_contexts",
        "pg_stat_reset*",
        "pg_*replication_slot*",
        "pg_replication_origin_*",
        "pg_logical_*",
        "pg_import_system_collations",
        "txid_current",
        "pg_current_xact_id",
    ),  # these two assign a transaction id: a write
    "SQL inside a string, which no plan shows": (
        "*_to_xml*",
        "ts_stat",
        "ts_rewrite",
        "crosstab*",
        "xpath_table",
        "connectby",
    ),
}
PLAN_BYTES = 1 << 20  # a longer plan is refused unread: only a folded constant makes one this long


# A PostgreSQL statement as the server's own parser reads it (pglast: libpg_query), before the
# server sees it. Every name in it that can run code when the query is planned or run is then
# looked up in the catalog (refuse_names) before any EXPLAIN or DECLARE.

Name = tuple[str | None, str]  # (schema, name): the schema where the statement gives one


@dataclass(frozen=True)
class Query:
    """One read-only query: ``text``, what the server is given, is the parse tree written back by
    pglast and checked to parse to the same tree, so the server reads what was checked (no
    comment, dollar quote or escape of the user's that a lexer could read otherwise); then what
    it names: functions called, names after a dot that may call a function on a row (``r.f`` is
    ``f(r)`` where ``r`` has no column ``f``), operators, types, relations and its WITH queries."""

    text: str
    functions: frozenset[Name]
    members: frozenset[str]
    operators: frozenset[Name]
    types: frozenset[Name]
    relations: frozenset[Name]
    ctes: frozenset[str]


# The operators a query uses without writing them: IN, BETWEEN, CASE x WHEN, NULLIF, IS DISTINCT
# FROM, JOIN ... USING and NATURAL JOIN look up =, <>, < and the rest by name, as written ones are.
IMPLICIT_OPERATORS = ("=", "<>", "<", ">", "<=", ">=")
# Statements that write, wherever they stand in the tree (a WITH query may be one).
_WRITING = {"InsertStmt": "INSERT", "UpdateStmt": "UPDATE", "DeleteStmt": "DELETE", "MergeStmt": "MERGE"}


def read_query(statement: str) -> Query:
    """``statement`` read by PostgreSQL's parser: exactly one SELECT, WITH or VALUES query that
    neither writes nor locks, else refused in one line."""
    from pglast import parse_sql
    from pglast.stream import RawStream

    tree = _one_statement(statement)
    if "SelectStmt" not in tree:
        raise StoreError(
            f"refused: tracker sql is read-only and runs one query (SELECT, WITH or VALUES), "
            f"not {_first_word(statement)}"
        )
    query = _names(tree)
    text = RawStream()(parse_sql(statement)[0])
    if _without_locations(_one_statement(text)) != _without_locations(tree):
        raise StoreError(
            "refused: tracker sql could not write this query back exactly as PostgreSQL parsed it: simplify it"
        )
    return Query(text, **query)


def _one_statement(statement: str) -> dict:
    from pglast import parser

    try:
        statements = json.loads(parser.parse_sql_json(statement)).get("stmts", [])
    except parser.ParseError as exc:
        raise StoreError(f"SQL error: {first_line(exc)}{ONE_QUERY}") from None
    if not statements:
        raise StoreError("refused: tracker sql is read-only and runs one query, and this statement holds none")
    if len(statements) > 1:
        raise StoreError(ONE_STATEMENT)
    return statements[0]["stmt"]


def _first_word(statement: str) -> str:
    from pglast import parser

    words = [t for t in parser.scan(statement) if not t.name.endswith("COMMENT")]
    return statement[words[0].start : words[0].end + 1].upper() if words else "this"


# Fields of a parse tree that say where in the text a node stood, not what it is.
_LOCATIONS = {"location", "list_start", "list_end"}


def _without_locations(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _without_locations(value) for key, value in node.items() if key not in _LOCATIONS}
    if isinstance(node, list):
        return [_without_locations(value) for value in node]
    return node


def _names(tree: dict) -> dict[str, frozenset]:
    """Every name in the parse tree, by what it names: every node of every field is read, so
    LIMIT, OFFSET, window frames, TABLESAMPLE, VALUES lists, sublinks and WITH queries too.
    A writing statement, SELECT INTO and FOR UPDATE/SHARE are refused."""
    found: dict[str, set] = {
        "functions": set(),
        "members": set(),
        "operators": {(None, name) for name in IMPLICIT_OPERATORS},
        "types": set(),
        "relations": set(),
        "ctes": set(),
    }
    stack: list[Any] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            for key, value in node.items():
                _note(key, value, found)
                stack.append(value)
    for _, name in sorted(found["functions"], key=lambda call: call[1]):  # a call's name alone may refuse it
        _refuse_reach(name)
    found["types"] |= found["functions"]  # f(x), where no function f is, casts x to a type f
    return {key: frozenset(names) for key, names in found.items()}


def _note(key: str, value: Any, found: dict[str, set]) -> None:
    if key in _WRITING:
        raise StoreError(f"refused: tracker sql is read-only, and this query holds {_WRITING[key]} (in WITH)")
    if key == "intoClause":
        raise StoreError("refused: tracker sql is read-only, and SELECT INTO makes a table")
    if key == "lockingClause":
        raise StoreError("refused: tracker sql is read-only, and FOR UPDATE or FOR SHARE locks rows")
    if key in ("funcname", "method"):  # a call, a TABLESAMPLE method (a function of its own)
        found["functions"].add(_dotted(value))
    elif key in ("A_Expr", "SubLink") and (value.get("name") or value.get("operName")):  # x + y, x = ANY (...)
        found["operators"].add(_dotted(value.get("name") or value["operName"]))
    elif key == "useOp":  # ORDER BY ... USING
        found["operators"].add(_dotted(value))
    elif key in ("typeName", "TypeName"):
        found["types"].add(_dotted(value["names"]))
    elif key == "RangeVar":
        found["relations"].add((value.get("schemaname"), value["relname"]))
    elif key == "CommonTableExpr":
        found["ctes"].add(value["ctename"])
    elif key == "ColumnRef":
        found["members"].update(_strings(value["fields"][1:]))
    elif key == "A_Indirection":
        found["members"].update(_strings(value["indirection"]))


def _strings(nodes: list) -> list[str]:
    return [node["String"]["sval"] for node in nodes if "String" in node]


def _dotted(nodes: list) -> Name:
    """A name as the parse tree writes it: a list of strings, the last the name itself."""
    names = _strings(nodes)
    return (names[-2] if len(names) > 1 else None), names[-1]


# Every routine each name the query gives may run, on this session's search_path (or in the
# schema given): a function (and its planner support function), an operator's function and its
# estimators, which run when the query is planned; and every cast between PostgreSQL's own types
# that runs a function, which a query may use without naming it. Then the types it names.
_ROUTINES = """
WITH routine AS (
    SELECT p.oid, p.proname, p.prosupport, n.nspname, e.extname
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    LEFT JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
    LEFT JOIN pg_extension e ON e.oid = d.refobjid
), named AS (
    SELECT * FROM unnest(%(schemas)s::text[], %(names)s::text[]) AS q(schema, name)
), own_type AS (
    SELECT t.oid FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
    WHERE n.nspname IN ('pg_catalog', 'information_schema')
)
SELECT 'function ' || f.nspname || '.' || f.proname, r.nspname, r.proname, r.extname
FROM routine f JOIN named q ON q.name = f.proname JOIN routine r ON r.oid IN (f.oid, f.prosupport)
WHERE q.schema = f.nspname OR q.schema = '' AND f.nspname = ANY(current_schemas(true))
UNION ALL
SELECT 'operator ' || n.nspname || '.' || o.oprname, r.nspname, r.proname, r.extname
FROM pg_operator o JOIN pg_namespace n ON n.oid = o.oprnamespace JOIN named q ON q.name = o.oprname
JOIN routine r ON r.oid IN (o.oprcode, o.oprrest, o.oprjoin)
WHERE q.schema = n.nspname OR q.schema = '' AND n.nspname = ANY(current_schemas(true))
UNION ALL
SELECT 'cast from ' || format_type(c.castsource, NULL) || ' to ' || format_type(c.casttarget, NULL),
       r.nspname, r.proname, r.extname
FROM pg_cast c JOIN routine r ON r.oid = c.castfunc
WHERE c.castsource IN (SELECT oid FROM own_type) AND c.casttarget IN (SELECT oid FROM own_type)
"""
_TYPES = """
SELECT n.nspname || '.' || t.typname, n.nspname, e.extname
FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
JOIN unnest(%(schemas)s::text[], %(names)s::text[]) AS q(schema, name) ON q.name = t.typname
LEFT JOIN pg_depend d ON d.classid = 'pg_type'::regclass AND d.objid = t.oid AND d.deptype = 'e'
LEFT JOIN pg_extension e ON e.oid = d.refobjid
WHERE q.schema = n.nspname OR q.schema = '' AND n.nspname = ANY(current_schemas(true))
"""
# Each relation the query names, as this session's search_path finds it, and whether it is one of
# the store's (in the schema of its run table).
_RELATIONS = """
SELECT q.name, n.nspname, c.relname, c.relkind,
       c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = to_regclass('run'))
FROM unnest(%(names)s::text[]) AS q(name)
LEFT JOIN pg_class c ON c.oid = to_regclass(q.name) LEFT JOIN pg_namespace n ON n.oid = c.relnamespace
"""
SYSTEM_SCHEMAS = ("pg_catalog", "information_schema")


def refuse_names(cursor: Any, query: Query) -> None:
    """Refuse ``query`` before the server plans it if a name in it may run code other than
    PostgreSQL's own (``pg_catalog``'s, from no extension) or one of ``OUTSIDE``, or it reads a
    relation other than the store's and the system catalogs': another's view may call its
    owner's functions, which the planner runs when it folds constants."""
    names = query.functions | {(None, member) for member in query.members} | query.operators
    for what, schema, name, extension in cursor.execute(_ROUTINES, _pairs(names)).fetchall():
        _refuse_reach(name)
        _refuse_foreign(f"{schema}.{name}()", schema, extension, what)
    for shown, schema, extension in cursor.execute(_TYPES, _pairs(query.types)).fetchall():
        if schema not in SYSTEM_SCHEMAS or extension:
            raise StoreError(
                f"refused: tracker sql uses only PostgreSQL's own types (pg_catalog), not {shown} "
                f"from {_source(schema, extension)}"
            )
    _refuse_relations(cursor, query)


def _pairs(names: frozenset[Name]) -> dict[str, list[str]]:
    ordered = sorted(names, key=lambda n: (n[1], n[0] or ""))
    return {"schemas": [schema or "" for schema, _ in ordered], "names": [name for _, name in ordered]}


def _refuse_reach(name: str) -> None:
    for reach, patterns in OUTSIDE.items():
        if any(fnmatchcase(name, pattern) for pattern in patterns):
            raise StoreError(f"refused: tracker sql is read-only, and {name}() reaches {reach}")


def _refuse_foreign(routine: str, schema: str, extension: str | None, what: str) -> None:
    if schema != "pg_catalog" or extension:
        through = "" if what == f"function {routine[:-2]}" else f", which the {what} runs"
        raise StoreError(
            f"refused: tracker sql calls only PostgreSQL's own functions (pg_catalog), "
            f"not {routine} from {_source(schema, extension)}{through}"
        )


def _source(schema: str, extension: str | None) -> str:
    return f"extension {extension}" if extension else f"schema {schema}"


def _refuse_relations(cursor: Any, query: Query) -> None:
    """The store's tables and views, the system catalogs and the query's own WITH queries: nothing
    else (a relation of no schema that is also the name of a WITH query must be neither)."""
    from tracker.store.reader import relations

    ordered = sorted(query.relations, key=lambda r: (r[1], r[0] or ""))
    quoted = [".".join(_quoted(part) for part in relation if part is not None) for relation in ordered]
    store = set(relations())
    for (schema, name), (_, found_schema, found, kind, in_store) in zip(
        ordered, cursor.execute(_RELATIONS, {"names": quoted}).fetchall()
    ):
        if found is None:
            if schema is None and name in query.ctes:
                continue
            raise StoreError(f'SQL error: relation "{".".join(p for p in (schema, name) if p)}" does not exist')
        if found_schema in SYSTEM_SCHEMAS or in_store and found in store and kind != "f":
            continue
        also = " (rename the WITH query of that name)" if name in query.ctes else ""
        raise StoreError(
            f"refused: tracker sql reads only the store's tables and views and the system catalogs, "
            f"not {found_schema}.{found}{also}"
        )


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# The plan is made and measured on the server (a DO block: EXPLAIN cannot be a subquery), and
# handed over through a setting only when it is short. The statement is one query, written by
# read_query and wrapped in _BOUNDED, so EXECUTE runs that one EXPLAIN and nothing else.
_PLAN = f"""
DO $$
DECLARE plan text;
BEGIN
    EXECUTE 'EXPLAIN (VERBOSE, FORMAT JSON) ' || current_setting('tracker.statement') INTO plan;
    PERFORM set_config('tracker.plan_bytes', octet_length(plan)::text, true);
    PERFORM set_config('tracker.plan', CASE WHEN octet_length(plan) <= {PLAN_BYTES} THEN plan ELSE '' END, true);
END
$$"""
# The schemas of the functions a name without one may be, on this session's search_path.
_SCHEMAS = """
SELECT p.proname, n.nspname, e.extname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
LEFT JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
LEFT JOIN pg_extension e ON e.oid = d.refobjid
WHERE p.proname = ANY(%(names)s) AND (n.nspname = ANY(current_schemas(true)) OR n.nspname = ANY(%(schemas)s))
"""


def refuse_outside(conn: Any, statement: str) -> None:
    """Refuse the query if its plan calls a function outside ``pg_catalog``, or one of
    ``OUTSIDE``, or is longer than ``PLAN_BYTES``: the second guard, after ``refuse_names``,
    which read what the plan does not show (a multi-row VALUES list, LIMIT, OFFSET)."""
    with conn.cursor() as cursor:
        cursor.execute("SELECT set_config('tracker.statement', %s, true)", (statement,))
        cursor.execute(_PLAN)
        size, plan = cursor.execute(
            "SELECT current_setting('tracker.plan_bytes')::bigint, current_setting('tracker.plan')"
        ).fetchone()
        if size > PLAN_BYTES:
            raise StoreError(
                f"refused: the query's plan is {size / 2**20:.0f} MiB, over tracker sql's "
                f"{PLAN_BYTES // 2**20} MiB: the planner wrote a long constant into it (such as "
                "repeat('x', 1000000000)); build no value that long from constants"
            )
        calls = called(plan)
        rows = cursor.execute(
            _SCHEMAS,
            {
                "names": sorted({name for _, name in calls}),
                "schemas": sorted({schema for schema, _ in calls if schema}),
            },
        ).fetchall()
    for schema, name in sorted(calls, key=lambda c: (c[1], c[0] or "")):
        where = [(nsp, ext) for proname, nsp, ext in rows if proname == name and schema in (None, nsp)]
        _refuse_function(name, where or ([(schema, None)] if schema else []))


def _refuse_function(name: str, where: list[tuple[str, str | None]]) -> None:
    """``name`` as the query called it, and every (schema, extension) it may come from (none: no
    function of that name, such as COALESCE or a type's modifiers)."""
    _refuse_reach(name)
    for schema, extension in sorted(where, key=lambda w: (w[0] == "pg_catalog", w)):
        _refuse_foreign(f"{schema}.{name}()", schema, extension, f"function {schema}.{name}")


Token = tuple[str | None, str | None]  # (a name, unquoted and folded as the server would; else one character)

# One token of an expression as the server writes it: a quoted name, a string, a name, or any other character.
_TOKEN = re.compile(r'"((?:[^"]|"")*)"|\'(?:[^\']|\'\')*\'|([^\W\d][\w$]*)|(\S)')
# Plan fields that hold a name, never an expression (an alias may hold any character).
_NAMES = {
    "Node Type",
    "Relation Name",
    "Schema",
    "Alias",
    "Index Name",
    "CTE Name",
    "Subplan Name",
    "Function Name",
    "Parent Relationship",
    "Strategy",
    "Join Type",
    "Partial Mode",
    "Operation",
    "Command",
    "Scan Direction",
    "Sort Method",
    "Sort Space Type",
}


def called(plan: Any) -> set[tuple[str | None, str]]:
    """Every function a PostgreSQL plan (EXPLAIN VERBOSE, JSON) calls, as (schema, name): the
    schema where the server wrote one (it does when the name alone would not find the function),
    else None. Every field of every node is read, whatever it holds."""
    if isinstance(plan, str):  # some drivers hand json back as text
        plan = json.loads(plan)
    calls: set[tuple[str | None, str]] = set()
    stack = [plan]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(value for key, value in node.items() if key not in _NAMES)
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            calls |= _calls(_expression_tokens(node))
    return calls


def _expression_tokens(expression: str) -> Iterator[Token]:
    for match in _TOKEN.finditer(expression):
        quoted, bare, other = match.groups()
        yield (quoted.replace('""', '"') if quoted is not None else bare.lower() if bare else None), other


def _calls(tokens: Iterator[Token]) -> set[tuple[str | None, str]]:
    """The (schema, name) of each call: a name, or two joined by a dot, then '('."""
    calls = set()
    names: list[str] = []  # the dotted name just read
    dot = False
    for name, other in tokens:
        if name is not None and (dot or not names):
            names, dot = (names + [name] if dot else [name]), False
        elif other == "." and names and not dot:
            dot = True
        else:
            if other == "(" and names and not dot:
                calls.add((names[-2] if len(names) > 1 else None, names[-1]))
            names, dot = ([name] if name is not None else []), False
    return calls
