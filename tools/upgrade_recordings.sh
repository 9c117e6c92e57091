#!/usr/bin/env bash
# Bring every committed recording (tests/data, but schema-v3/, which the migration test keeps as
# recorded) to this tracker's trace schema: `tracker upgrade` (which keeps every run and value),
# then VACUUM; a .db.gz is unpacked, upgraded and packed again (gzip -9 -n: no name or time stamp,
# so an unchanged database packs to the same bytes). tests/test_recordings.py says when to run it.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
find tests/data -name '*.db' -o -name '*.db.gz' | grep -v '/schema-v3/' | sort | while read -r file; do
    db="$work/$(basename "${file%.gz}")"
    if [[ "$file" == *.gz ]]; then gzip -dc "$file" > "$db"; else cp "$file" "$db"; fi
    python -m tracker upgrade --db "$db"
    python - "$db" <<'PY'
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
conn.execute("PRAGMA journal_mode = DELETE")  # one file, no -wal beside it
conn.execute("VACUUM")
conn.close()
PY
    if [[ "$file" == *.gz ]]; then gzip -9 -n -c "$db" > "$file"; else cp "$db" "$file"; fi
    rm -f "$db"
done
