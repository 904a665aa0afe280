#!/usr/bin/env bash
# The project's test command: lint, types, import layering, then the test suite.
# Fails when any step fails, and when pytest collects no test (exit 5).
set -euo pipefail
cd "$(dirname "$0")"
echo "== ruff";          ruff check .
echo "== mypy --strict"; mypy
echo "== import-linter"; lint-imports
echo "== pytest";        python -m pytest "$@"
