#!/usr/bin/env bash
# The project's test command: lint, types, import layering, then the test suite.
# Fails when any step fails, and when pytest collects no test (exit 5).
set -euo pipefail
cd "$(dirname "$0")"
echo "== ruff";          ruff check .
echo "== mypy --strict"; mypy
echo "== import-linter"; lint-imports
# Two worker processes (pytest-xdist; MIGFIT_TEST_WORKERS=0 runs in this process): most tests
# wait on servers and subprocesses, so two workers halve the suite's time on 2 cores. A file's
# tests stay on one worker, one after another (--dist loadfile): some start servers on the
# default ports, which two at once would contend for.
echo "== pytest";        python -m pytest -n "${MIGFIT_TEST_WORKERS:-2}" --dist loadfile "$@"
